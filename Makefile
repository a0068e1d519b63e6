# parlab — make lab (JupyterLab on notebooks/), make test (everything CI runs), make site (build/site/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: lab test quick unit notebooks lint tour clean site browser-deps

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# JupyterLab on 127.0.0.1 only, with a fresh random token that never appears in argv (tools/lab.py
# hands it over in a 0600 file); it prints the URL that logs you in. LAB_ARGS: more jupyter lab
# arguments (e.g. LAB_ARGS=--no-browser).
lab: $(STAMP)
	$(BIN)/python tools/lab.py notebooks/ $(LAB_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check parlab tests data tools notebooks
	$(BIN)/nbstripout --verify --keep-count --extra-keys "metadata.papermill cell.metadata.papermill metadata.widgets" notebooks/*.ipynb
	$(BIN)/python tools/hygiene.py notebooks/*.ipynb

# Debian's Chromium (the browser tests drive it; never a downloaded browser) and npm (make site
# fetches the offline widget renderer and MathJax with it), installed with apt when missing.
browser-deps: $(STAMP)
	$(BIN)/python tools/browser.py

# Four streams at once: the chapters in JupyterLab in two halves (tests/test_browser.py with
# PARLAB_BROWSER_SHARD=0/2 and 1/2) beside every other test in UNIT_SHARDS shards
# (PARLAB_UNIT_SHARD=i/n: whole files, balanced by their times in tests/durations.json; a rank
# waiting for its peer, a fault test waiting for a timeout or a process starting leaves a core
# idle that another stream uses; a third shard measured slower, 18.3 vs 16.7 min: the 2 cores are
# then saturated and each shard starts and caches its own runs). Paced runs keep virtual time
# (nothing sleeps, parlab.core.clock), so no test needs a quiet machine: the acceptance test of
# virtual time (tests/test_clock.py) runs beside the others and starts two CPU burners of its own.
# Bytecode is cached (__pycache__, git-ignored) even where PYTHONDONTWRITEBYTECODE is set: the
# suite starts ~150 interpreters (kernels, forkservers, torchrun workers, CLI runs), each compiling
# parlab again without it. Each stream's report is printed when all are done; any failing fails
# the target. build/test-unit-*.xml hold every test's time (tools/durations.py).
UNIT_SHARDS ?= 2
unit: $(STAMP) browser-deps
	@mkdir -p build; unset PYTHONDONTWRITEBYTECODE; \
	PARLAB_BROWSER_SHARD=0/2 $(BIN)/python -m pytest tests/test_browser.py -q -p no:cacheprovider \
		--durations=0 > build/test-browser-0.log 2>&1 & \
	browser0=$$!; \
	PARLAB_BROWSER_SHARD=1/2 $(BIN)/python -m pytest tests/test_browser.py -q -p no:cacheprovider \
		--durations=0 > build/test-browser-1.log 2>&1 & \
	browser1=$$!; \
	shards=""; \
	for i in $$(seq 0 $$(($(UNIT_SHARDS) - 1))); do \
		PARLAB_UNIT_SHARD=$$i/$(UNIT_SHARDS) $(BIN)/python -m pytest tests -q -p no:cacheprovider \
			--durations=15 --junitxml=build/test-unit-$$i.xml --ignore tests/test_browser.py \
			> build/test-unit-$$i.log 2>&1 & \
		shards="$$shards $$!"; \
	done; \
	failed=0; i=0; \
	for pid in $$shards; do \
		wait $$pid || failed=1; \
		echo "== the other tests, shard $$i/$(UNIT_SHARDS) (PARLAB_UNIT_SHARD), run beside the chapters:"; \
		cat build/test-unit-$$i.log; i=$$((i + 1)); \
	done; \
	wait $$browser0 || failed=1; \
	wait $$browser1 || failed=1; \
	echo "== tests/test_browser.py (the chapters in JupyterLab, two halves), run beside the others:"; \
	cat build/test-browser-0.log build/test-browser-1.log; \
	test $$failed = 0

# Golden cells (NBVAL_CHECK_OUTPUT) of every chapter, executed at its stored parameters. `make
# test` checks the same golden cells on the browser test's own execution of each chapter
# (tests/test_browser.py), so CI executes every chapter once at its defaults, not twice.
notebooks: $(STAMP)
	cd notebooks && ../$(BIN)/python -m pytest --nbval-lax -q -p no:cacheprovider .

test: lint unit

# For iteration (~5 min on 2 cores): lint and the unit, equivalence and ledger tests; no notebooks, no
# browser, no site, no torchrun.
quick: lint
	$(BIN)/python -m pytest tests -q -x -m "not slow and not browser" --ignore tests/test_notebooks.py \
		--ignore tests/test_site.py --ignore tests/test_browser.py --ignore tests/test_torchrun.py

# Execute every chapter with papermill into build/ (never over notebooks/).
tour: $(STAMP)
	mkdir -p build
	for nb in notebooks/*.ipynb; do $(BIN)/papermill -k python3 "$$nb" "build/$$(basename $$nb)" || exit 1; done

# The executed chapters as a static site that works offline: open build/site/index.html.
site: $(STAMP) browser-deps
	$(BIN)/python tools/site.py --out build/site
	@echo "site: open build/site/index.html"

clean:
	rm -rf build .pytest_cache
