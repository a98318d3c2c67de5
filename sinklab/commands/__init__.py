"""What each ``sinklab`` subcommand does, grouped by noun; ``sinklab/cli.py`` parses the command line and
calls them. A handler takes the parsed arguments and returns the exit status; it raises a ``SinklabError``
(``CliError`` for a wrong argument) for ``cli.main`` to print in one line."""

from sinklab.commands.connect import cmd_connect
from sinklab.commands.demo import cmd_demo
from sinklab.commands.dlq import cmd_dlq_replay
from sinklab.commands.doctor import cmd_doctor
from sinklab.commands.explore import cmd_explore
from sinklab.commands.generate import cmd_generate
from sinklab.commands.jars import cmd_jars_export, cmd_jars_fetch
from sinklab.commands.jvm import cmd_jvm_train
from sinklab.commands.sink import cmd_sink_run, cmd_sink_status
from sinklab.commands.stack import cmd_stack_down, cmd_stack_status, cmd_stack_up
from sinklab.commands.table import cmd_table
from sinklab.commands.traffic import cmd_traffic

__all__ = [
    "cmd_connect", "cmd_demo", "cmd_dlq_replay", "cmd_doctor", "cmd_explore", "cmd_generate", "cmd_jars_export",
    "cmd_jars_fetch", "cmd_jvm_train", "cmd_sink_run", "cmd_sink_status", "cmd_stack_down", "cmd_stack_status",
    "cmd_stack_up", "cmd_table", "cmd_traffic"
]
