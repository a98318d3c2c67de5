# The two README commands: `make demo` and `make test`. Both set up what they need, and no more.
VENV := .venv
PY := $(VENV)/bin/python
JARS_STAMP := $(VENV)/.jars
REGISTRY_STAMP := $(VENV)/.schema-registry
JAVA_SINK_STAMP := $(VENV)/.java-sink
WORKDIR ?= .sinklab/demo
KERNEL := sinklab

# sinklab runs on Python 3.11 to 3.13. Unless PYTHON is given, the first of these that runs and is one of
# them: the machine's python3 first (Ubuntu 24.04 has 3.12, Debian 13 3.13), then by name.
SUPPORTED_PYTHON := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
ifndef PYTHON
PYTHON := $(firstword $(foreach p,python3 python3.13 python3.12 python3.11,$(shell $(p) -c '$(SUPPORTED_PYTHON)' >/dev/null 2>&1 && echo $(p))))
endif

.PHONY: setup setup-notebooks setup-all workshop-prep java tools test lint demo notebooks docs docs-serve lab bench \
	clean

# What each command needs, and only that: the demo sinklab and its dependencies; the tutorials add the
# notebooks extra (and the kernel); the tests add every extra, the schema registry built from its jars (the
# tests start one) and Apache's own Iceberg sink (the tests and notebook 11 run it beside sinklab).
setup: $(VENV)/.installed java $(JARS_STAMP)

setup-notebooks: setup $(VENV)/.installed-notebooks

setup-all: setup-notebooks $(VENV)/.installed-all $(REGISTRY_STAMP) $(JAVA_SINK_STAMP)

# Every jar any tutorial needs, before a workshop: the room's laptops then run them offline.
workshop-prep: setup-notebooks
	$(VENV)/bin/sinklab jars fetch --all

# The packages are installed by uv (from PyPI, into the venv): the same versions pip installs, in less
# time (bench/README.md, "make setup's install"), at the versions of constraints.txt (what the suite tests).
# Compiled to bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, no process would cache it, and
# each import would compile again. uv reads UV_INDEX_URL / UV_DEFAULT_INDEX, not pip.conf: behind a mirror
# set up for pip, `make INSTALLER=pip ...`.
INSTALLER ?= uv
INSTALL := $(if $(filter uv,$(INSTALLER)),$(VENV)/bin/uv pip install --compile-bytecode --python $(PY),$(PY) -m pip install) \
	--quiet -c constraints.txt
EDITABLE := PYTHONWARNINGS="ignore:Editable installation" $(INSTALL) -e

$(PY):
	@[ -n "$(PYTHON)" ] || { echo "sinklab needs Python 3.11, 3.12 or 3.13: none of python3, python3.13, python3.12," \
		"python3.11 on PATH is one; install one, or set PYTHON=/path/to/python3.x"; exit 1; }
	@$(PYTHON) -c '$(SUPPORTED_PYTHON)' 2>/dev/null || { echo "sinklab needs Python 3.11 to 3.13; PYTHON=$(PYTHON)" \
		"is $$($(PYTHON) --version 2>&1)"; exit 1; }
	@echo "setup: $$($(PYTHON) -c 'import sys; print("Python", sys.version.split()[0], "at", sys.executable)')" \
		"(PYTHON=$(PYTHON)), a virtualenv in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet -c constraints.txt --upgrade pip $(filter uv,$(INSTALLER))

$(VENV)/.installed: pyproject.toml constraints.txt | $(PY)
	@echo "setup: sinklab and what the demo needs, from PyPI (a minute the first time)"
	@t=$$(date +%s); $(EDITABLE) . && echo "setup: ready in $$(( $$(date +%s) - t )) s"
	@touch $@

# The kernelspec `sinklab` (inside the venv) runs the notebooks on this venv's python, whatever other
# Jupyter kernels the machine has.
$(VENV)/.installed-notebooks: $(VENV)/.installed
	@echo "setup: the notebooks extra (JupyterLab, plotly, papermill)"
	@$(EDITABLE) ".[notebooks]"
	@$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (sinklab)" >/dev/null
	@touch $@

$(VENV)/.installed-all: $(VENV)/.installed-notebooks
	@echo "setup: the dev, s3 and docs extras (the tests and the docs site)"
	@$(EDITABLE) ".[dev,s3,notebooks,docs]"
	@touch $@

# The JVM parts from Maven Central (PySpark's Ivy; no mvn), into ~/.cache/sinklab/jars: the tests and
# the demo then start without downloading anything. Pinned in sinklab/stack/jars.py.
$(JARS_STAMP): $(VENV)/.installed sinklab/stack/jars.py | java
	$(VENV)/bin/sinklab jars fetch
	@touch $(JARS_STAMP)

$(REGISTRY_STAMP): $(JARS_STAMP) sinklab/stack/registry_build.py
	$(VENV)/bin/sinklab jars fetch schema-registry
	@touch $(REGISTRY_STAMP)

$(JAVA_SINK_STAMP): $(JARS_STAMP)
	$(VENV)/bin/sinklab jars fetch iceberg-connect
	@touch $(JAVA_SINK_STAMP)

# Spark 4.1 needs Java 17+; install the Debian JRE where it is missing and apt exists.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -n "$$v" ] && [ "$$v" -ge 17 ]; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1; then \
		echo "Java 17+ not found: installing openjdk-17-jre-headless"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
	else \
		echo "sinklab needs Java 17 or newer on PATH (found: $${v:-none}); install a JDK/JRE 17+ and retry"; exit 1; \
	fi

# Programs from Debian, each installed only for what needs it: the Connect API tests drive the server with
# the real curl (and jq, as the seed's tutorial does); a figure's PNG (the executed notebooks' HTML, the
# browser test) is drawn in Debian's chromium (kaleido). JupyterLab and the demo need none of them.
TOOLS ?= curl jq chromium
tools:
	@missing=""; for t in $(TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
		echo "this needs$$missing on PATH: install with your package manager (chromium: any Chromium or Chrome," \
			"or set BROWSER_PATH)"; exit 1; \
	fi

lint: $(VENV)/.installed-all
	$(VENV)/bin/ruff check sinklab tests bench docs

# The suite's drivers map the class archive (tests/spark_jvm.py); trained here, outside pytest's time.
# Two workers, each with its own shared stack: most of the suite's time is waiting (bench/README.md, "The demo
# and the suite, run by run"); the notebooks all on one of them (their own shared stack, --dist loadgroup); then
# the tests marked serial, alone.
test: setup-all lint tools
	@$(VENV)/bin/sinklab jvm train
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup -m "not serial"
	$(VENV)/bin/pytest -q -m serial

# When make started (parsed once, before setup runs): the demo's last line is the whole wall time.
STARTED := $(shell date +%s)

demo: setup
	$(VENV)/bin/sinklab demo --workdir $(WORKDIR)
	@echo "make demo: $$(( $$(date +%s) - $(STARTED) )) s, setup included"

# Every tutorial headless, executed copies in .sinklab/notebooks/ (the committed ones stay clean), each
# also as self-contained HTML (figures as PNGs, no JavaScript needed) to hand out; ARGS="-p workshop True".
# All on one shared stack, whose Spark Connect server's driver (warm after the first) runs their sinks
# and queries; stopped at the end, also when a notebook fails. NB_STACK="" gives each its own stack.
NB_STACK ?= .sinklab/notebooks/stack
notebooks: setup-notebooks $(REGISTRY_STAMP) $(JAVA_SINK_STAMP)
	@$(MAKE) --no-print-directory tools TOOLS=chromium
	@mkdir -p .sinklab/notebooks
	@shared=""; all=$$(date +%s); \
	if [ -n "$(NB_STACK)" ]; then \
		[ ! -f "$(NB_STACK)/stack.json" ] || $(VENV)/bin/sinklab stack down --workdir "$(NB_STACK)" >/dev/null; \
		rm -rf "$(NB_STACK)"; \
		$(VENV)/bin/sinklab stack up --workdir "$(NB_STACK)" --spark-connect --schema-registry || exit 1; \
		trap '$(VENV)/bin/sinklab stack down --workdir "$(NB_STACK)" >/dev/null' EXIT; \
		shared="-p stack_at $(CURDIR)/$(NB_STACK)/stack.json"; \
	fi; \
	for nb in notebooks/*.ipynb; do \
		out=".sinklab/notebooks/$$(basename $$nb)"; \
		echo "== $$nb"; \
		start=$$(date +%s); \
		$(VENV)/bin/papermill --engine sinklab --kernel $(KERNEL) --cwd notebooks --no-progress-bar "$$nb" "$$out" $$shared $(ARGS) || exit 1; \
		echo "   $$(( $$(date +%s) - start )) s"; \
		$(VENV)/bin/jupyter nbconvert --to html --log-level ERROR "$$out" || exit 1; \
	done; \
	echo "make notebooks: $$(( $$(date +%s) - all )) s for the eleven$${shared:+, the shared stack's start included}"

# The documentation site, offline, into .sinklab/site (mkdocs.yml): the tutorials' pages are the executed
# notebooks of `make notebooks`, run again when one is missing or older than its source.
DOCS_PORT ?= 8000
docs: setup-all
	@for nb in notebooks/*.ipynb; do out=".sinklab/notebooks/$$(basename $$nb)"; \
		if [ ! "$$out" -nt "$$nb" ]; then $(MAKE) --no-print-directory notebooks || exit 1; break; fi; done
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "make docs: the site is in .sinklab/site (open index.html there, or make docs-serve)"

docs-serve: docs
	@echo "the docs on http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops)"
	$(PY) -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory .sinklab/site

lab: setup-notebooks
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --notebook-dir=notebooks

# Not part of the tests: figures with their baselines (bench/README.md); ARGS=--sweep 1000,5000 etc.
bench: setup
	$(PY) bench/ingest.py $(or $(ARGS),--quick)

clean:
	rm -rf $(VENV) .sinklab *.egg-info .pytest_cache .ruff_cache
