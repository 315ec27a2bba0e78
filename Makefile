# The course's commands. A fresh machine needs only Python 3.10+ (and make).
#   make lab     install the course into .venv and open JupyterLab on the start page
#   make test    install the course with its test extras and run every test (unit + notebooks under nbval)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
NB     ?= notebooks
JOBS   ?= 2

.PHONY: lab test test-unit test-notebooks test-gpu execute student grade bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Stamps re-run the install when pyproject.toml changes.
$(VENV)/.course: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.course-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@ $(VENV)/.course

lab: $(VENV)/.course
	$(BIN)/jupyter lab --ServerApp.port=$(PORT) notebooks/00_start_here.ipynb

test: $(VENV)/.course-test
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env -q -rs tests notebooks

test-unit: $(VENV)/.course-test
	$(BIN)/python -m pytest -q tests

test-notebooks: $(VENV)/.course-test
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env -q $(NB)

# The notebook suite with the CuPy backend forced: fails loudly where no GPU can run it.
test-gpu: $(VENV)/.course-test
	MLSYS_LAB_BACKEND=cupy $(BIN)/python -m pytest --nbval-lax --nbval-current-env -q -rs notebooks tests

# Re-run notebooks (all, or NB=notebooks/03_roofline.ipynb) and store their outputs.
execute: $(VENV)/.course
	$(BIN)/python -m mlsys_lab.course.execute $(NB)

student: $(VENV)/.course
	$(BIN)/mlsys-lab student notebooks student

bench: $(VENV)/.course
	$(BIN)/python benchmarks/widget_latency.py

clean:
	rm -rf $(VENV) student artifacts
