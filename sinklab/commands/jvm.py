"""`sinklab jvm train`: the Spark driver's class archive, for a warm first cycle."""

from __future__ import annotations

import argparse
import time

from sinklab.exceptions import CliError


def cmd_jvm_train(args: argparse.Namespace) -> int:
    from sinklab.stack import jvm_archive

    archive = jvm_archive.path()
    if archive.exists() and not args.force:
        print(f"class archive {archive} ({archive.stat().st_size / 1e6:.0f} MB): trained already")
        return 0
    started = time.monotonic()
    try:
        archive = jvm_archive.train()
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    print(f"class archive {archive} ({archive.stat().st_size / 1e6:.0f} MB, trained in "
          f"{time.monotonic() - started:.0f}s); Spark drivers map it with {jvm_archive.ENV}=on")
    return 0
