"""Does every hint's code run, and does it lead to an answer the check accepts? (Issue 31, erratum 3.)

Every fenced code block inside a hint tier of every exercise prompt is completed as a learner would complete it
(``hint_completions.COMPLETIONS``: its gaps filled, the setup hint 2 describes before it), pasted into the exercise
cell in place of the solution, run in a namespace like the notebook's (the cells the grader gives the exercise,
:func:`prompts.exercise_namespace`) and judged by the exercise's own check cell, which must print a pass. A hint
that crashes on a case the check holds (lesson 09's diagnosis hint on a hang at step 0) fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import numpy as np
import pytest
from hint_completions import COMPLETIONS, Completion
from prompts import GAP, Prompt, all_prompts, exercise_namespace, notebook, run_check, with_body

from mlsys_lab import backend
from mlsys_lab.exercises import PASS

HINTED = {p.exercise.name: p for p in all_prompts() if p.hint_blocks()}


def filled(code: str, fills: tuple[str, ...]) -> str:
    """``code`` with its ``...`` gaps replaced by ``fills`` in order; a fill of several lines is indented like
    the line of its gap."""
    gaps = len(GAP.findall(code))
    if gaps != len(fills):
        raise ValueError(f"the hint has {gaps} gaps, the completion {len(fills)} fills")
    queue = list(fills)
    lines = []
    for line in code.splitlines():
        newline = "\n" + line[: len(line) - len(line.lstrip())]
        lines.append(GAP.sub(lambda _, newline=newline: queue.pop(0).replace("\n", newline), line))
    return "\n".join(lines)


def completed_body(code: str | None, completion: Completion) -> str:
    if code is None:
        return completion.before
    hint = textwrap.indent(filled(code, completion.fills), " " * completion.indent)
    return f"{completion.before}{hint}\n{completion.after}"


def completions_of(name: str) -> list[Completion]:
    found = COMPLETIONS[name]
    return found if isinstance(found, list) else [found]


def completed_cell(prompt: Prompt) -> str:
    """The exercise cell with each solution region replaced by its completed hint."""
    blocks = [code for _, code in prompt.hint_blocks()]
    bodies = [completed_body(None if c.block is None else blocks[c.block], c)
              for c in completions_of(prompt.exercise.name)]
    return with_body(notebook(prompt.lesson).cells[prompt.exercise.exercise_cell].source, *bodies)


def test_every_hint_has_its_completion():
    """Does every hint code block have a completion, used once, and every completion a hint?"""
    missing = sorted(set(HINTED) - set(COMPLETIONS))
    stale = sorted(set(COMPLETIONS) - set(HINTED))
    assert not missing, f"hints with code and no completion: {missing}"
    assert not stale, f"completions of no hint: {stale}"
    uncovered = {name: sorted(set(range(len(p.hint_blocks()))) - {c.block for c in completions_of(name)})
                 for name, p in HINTED.items()}
    assert not any(uncovered.values()), f"hint code blocks no completion runs: {uncovered}"


def test_filling_keeps_a_gaps_indentation():
    code = "for x in xs:\n    ...  # the body\nreturn y"
    assert filled(code, ("a = 1\nb = 2",)) == "for x in xs:\n    a = 1\n    b = 2  # the body\nreturn y"
    with pytest.raises(ValueError, match="1 gaps"):
        filled(code, ())


@pytest.mark.parametrize("name", sorted(HINTED), ids=lambda n: f"{HINTED[n].lesson[:2]}-{n}")
def test_hint_completes_into_a_passing_answer(name):
    prompt: Prompt = HINTED[name]
    source = completed_cell(prompt)
    if "compile_learner_kernel" in source and not backend.on_gpu:
        pytest.skip("a CUDA kernel exercise: its check compiles and runs the learner's kernel on a GPU")
    verdict = run_check(prompt, exercise_namespace(prompt, source))
    assert verdict.startswith(f"{PASS} {name}"), (
        f"{prompt.lesson}, the hint of {name}, completed, does not pass its check:\n{verdict}\n"
        f"--- the completed cell ---\n{source}")


UNGUARDED_DIAGNOSIS_HINT = """hang_step, hung, detected = None, [], None
for s in range(len(enter)):
    if np.isnan(enter[s]).all():
        break
    deadline = np.nanmin(enter[s]) + timeout_seconds
    late = [int(r) for r in np.flatnonzero(~(enter[s] <= deadline))]
    if late:
        ...  # record and stop
done = len(enter) if hang_step is None else hang_step
previous = np.vstack([np.zeros((1, enter.shape[1])), leave[:done - 1]])
medians = np.median(enter[:done] - previous, axis=0)"""


def test_the_unguarded_diagnosis_hint_is_caught():
    """Would this test have caught lesson 09's hint 3 as it was before issue 31 (no guard for a hang at step 0)?"""
    prompt = HINTED["diagnose"]
    completion = Completion(fills=("hang_step, hung, detected = s, late, float(deadline)\nbreak",), after="""
stragglers = [int(r) for r in np.flatnonzero(medians > 1.15 * np.median(medians))]
return {"hang_step": hang_step, "hung_ranks": hung, "detected_at": detected, "stragglers": stragglers}
""")
    source = with_body(notebook(prompt.lesson).cells[prompt.exercise.exercise_cell].source,
                       completed_body(UNGUARDED_DIAGNOSIS_HINT, completion))
    verdict = run_check(prompt, exercise_namespace(prompt, source))
    assert not verdict.startswith(PASS), verdict
    assert "never enter step 0" in verdict, verdict


CUDA_HINTED = sorted(name for name in HINTED if "compile_learner_kernel" in completed_cell(HINTED[name]))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", CUDA_HINTED)
def test_cuda_hint_compiles_where_no_gpu_runs_it(name, tmp_path):
    """Does a kernel exercise's hint, completed into the cell, give CUDA C that nvcc compiles (sm_90)? On a GPU the
    test above also runs it; here the hint is at least CUDA, not a comment Python would take."""
    namespace = {"np": np}
    exec(completed_cell(HINTED[name]), namespace)
    sources = [value for key, value in namespace.items() if key.endswith("_SOURCE") and isinstance(value, str)]
    assert sources, f"{name}: no *_SOURCE string in its cell"
    for number, source in enumerate(sources):
        path = tmp_path / f"{name}_{number}.cu"
        path.write_text("\n".join("" if "SOLUTION" in line else line for line in source.splitlines()))
        done = subprocess.run(["nvcc", "-arch=sm_90", "-c", str(path), "-o", str(path.with_suffix(".o"))],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-1500:]
