# The course's commands. A fresh machine needs only Python 3.10+ (and make).
#   make lab       install the course into .venv and open JupyterLab on the start page
#   make test-all  install the course with its test extras and run every test (unit + notebooks under nbval); CI
#   make test      the developer's quick lane: the same, less the tests marked exhaustive and catalogue seeds 5-49
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
NB     ?= notebooks
JOBS   ?= 2
LAB_FLAGS ?=
# JupyterLab refuses to run as root (containers, classroom VMs) unless told it may.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test test-all test-unit test-notebooks test-gpu execute student grade bench clean

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
	$(BIN)/jupyter lab --ServerApp.port=$(PORT) $(ROOT_FLAG) $(LAB_FLAGS) notebooks/student/00_start_here.ipynb

# Both lanes run every kind of test; test-all adds the repetitions: every lesson graded, every handout in the
# browser, every seed of the wrong-answer catalogues (tests/lanes.py). test prints what it left out.
test: $(VENV)/.course-test
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env -q -rs tests notebooks

test-all: $(VENV)/.course-test
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env -q -rs --exhaustive tests notebooks

test-unit: $(VENV)/.course-test
	$(BIN)/python -m pytest -q tests

test-notebooks: $(VENV)/.course-test
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env -q $(NB)

# The whole suite with the CuPy backend forced: fails loudly where no GPU can run it.
# On a machine whose Python already has the stack (an offline GPU server), skip the venv:
#   make test-gpu SYSTEM_PYTHON=python3 [GPU_TESTS="notebooks/00_start_here.ipynb tests/floor/test_backend.py"]
GPU_TESTS ?= tests notebooks
ifdef SYSTEM_PYTHON
GPU_PY   := $(SYSTEM_PYTHON)
GPU_DEPS :=
else
GPU_PY   := $(BIN)/python
GPU_DEPS := $(VENV)/.course-test
endif
test-gpu: $(GPU_DEPS)
	MLSYS_LAB_BACKEND=cupy $(GPU_PY) -m pytest --nbval-lax --nbval-current-env \
		--nbval-sanitize-with tests/gpu_lane_sanitize.cfg -q -rs $(GPU_TESTS)

# Re-run notebooks (all, or NB=notebooks/03_roofline.ipynb), store their outputs, and remake the handouts.
execute: $(VENV)/.course
	$(BIN)/python -m mlsys_lab.course.execute $(NB)
	$(BIN)/mlsys-lab student notebooks notebooks/student

# Handouts go beside the lessons, so the Lab that `make lab` opens shows them; they are committed, because the
# Colab and Binder badges open them from the repository (tests/course/test_student.py checks they are current).
student: $(VENV)/.course
	$(BIN)/mlsys-lab student notebooks notebooks/student

# make grade REF=notebooks/03_roofline.ipynb SUBMISSIONS=submissions/03/ [CSV=grades_03.csv] [JSON=grades_03.jsonl]
# prints the table and writes the class table (CSV) and one JSON line per submission.
grade: $(VENV)/.course
	@test -n "$(REF)" -a -n "$(SUBMISSIONS)" || { echo "usage: make grade REF=notebooks/NN_lesson.ipynb SUBMISSIONS=folder/ [CSV=grades.csv] [JSON=grades.jsonl]"; exit 2; }
	$(BIN)/mlsys-lab grade $(SUBMISSIONS) --reference $(REF) --csv $(or $(CSV),grades.csv) --json-file $(or $(JSON),grades.jsonl)

bench: $(VENV)/.course
	$(BIN)/python benchmarks/widget_latency.py

clean:
	rm -rf $(VENV) artifacts
