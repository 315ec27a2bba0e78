"""Driving a notebook in JupyterLab through Playwright, and listing what a learner would see go wrong."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

SETTINGS = {
    # Render every cell (no windowing), so every output is in the page to be inspected.
    # Start the notebook's own kernel without asking (no "Select Kernel" dialog over the page).
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                   "autoStartDefaultKernel": True},
    # No news or update pop-ups over the notebook (and no network calls for them).
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Every code cell with code shows an execution count "[n]:" (none queued "[*]:", none blank "[ ]:").
ALL_RAN = """() => [...document.querySelectorAll('.jp-CodeCell')].every(cell => {
    const code = cell.querySelector('.jp-InputArea-editor');
    const prompt = cell.querySelector('.jp-InputPrompt');
    return !code || !code.textContent.trim() || /\\[\\d+\\]/.test(prompt.textContent);
})"""


NONE_RAN = """() => ![...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .some(prompt => /\\[\\d+\\]/.test(prompt.textContent))"""


STARTED = "[...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].some(p => p.textContent.includes('*'))"


STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
TRACEBACK_SHOWN = f"[...document.querySelectorAll(\"{STDERR}\")].some(o => o.textContent.includes('Traceback'))"


def write_settings(settings_dir: Path) -> None:
    for name, values in SETTINGS.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def open_notebook(page, url: str, timeout_ms: int = 90_000) -> None:
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_ms)
    dialog_button = page.locator(".jp-Dialog button", has_text="Select")
    if dialog_button.count():  # "Select Kernel" appears on some first opens: take the notebook's own
        dialog_button.first.click()
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout_ms)


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def menu_until(page, top: str, item: str, condition_js: str, attempts: int = 3, timeout_ms: int = 20_000) -> None:
    """Click a menu item until ``condition_js`` holds: a click that lands before the command is enabled
    (the notebook still loading, the kernel still connecting) does nothing, so it is tried again."""
    for attempt in range(attempts):
        menu(page, top, item)
        try:
            page.wait_for_function(condition_js, timeout=timeout_ms)
            return
        except Exception:
            page.keyboard.press("Escape")
            if attempt == attempts - 1:
                raise


def run_all_cells(page, timeout_ms: int = 300_000) -> float:
    """Clear the stored outputs, Run All Cells, wait until every cell has run. Returns seconds taken."""
    start = time.monotonic()
    # The stored counts must go first, so that no stale "[n]:" passes for a fresh run.
    menu_until(page, "Edit", "Clear Outputs of All Cells", NONE_RAN)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=timeout_ms)
    menu_until(page, "Run", "Run All Cells", f"() => !({NONE_RAN})() || {STARTED}")
    # Run All stops at a cell that raises: then not every cell gets a number, so stop waiting at a traceback.
    page.wait_for_function(f"() => ({ALL_RAN})() || {TRACEBACK_SHOWN}", timeout=timeout_ms)
    settle(page)
    return time.monotonic() - start


def settle(page, quiet_seconds: float = 1.5, timeout_s: float = 60) -> None:
    """Wait until the kernel is idle and no output has arrived for ``quiet_seconds``.

    A cell's execution count comes on the shell channel and its printed output on the IOPub channel;
    the count can arrive first, so "every cell numbered" alone does not mean "every output shown".
    """
    deadline, last, quiet_since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        state = (page.locator(".jp-OutputArea-output").count(),
                 page.locator(".jp-Notebook-ExecutionIndicator").first.get_attribute("data-status"))
        if state != last:
            last, quiet_since = state, time.monotonic()
        elif state[1] == "idle" and time.monotonic() - quiet_since >= quiet_seconds:
            return
        time.sleep(0.25)
    raise TimeoutError(f"the notebook did not settle within {timeout_s} s (last state {last})")


def cell_problems(page) -> list[str]:
    """Cells never run, and outputs that show a traceback."""
    problems = []
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    unrun = [i for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)]
    code = page.locator(".jp-CodeCell .jp-InputArea-editor").all_inner_texts()
    unrun = [i for i in unrun if code[i].strip()]  # an empty cell has nothing to run
    if unrun:
        problems.append(f"code cells {unrun} did not run")
    stderr = page.locator(STDERR)
    for text in stderr.all_inner_texts():
        if "Traceback" in text or re.search(r"^\w*(Error|Exception)\b", text, re.MULTILINE):
            problems.append("an output shows an error: " + text.strip().splitlines()[-1][:200])
    return problems


def widget_problems(page) -> list[str]:
    """Widget outputs that did not render: still loading, an error, or the plain-text fallback."""
    problems = []
    for i, text in enumerate(page.locator(".jp-OutputArea-output").all_inner_texts()):
        if "Loading widget" in text or "Error displaying widget" in text:
            problems.append(f"output {i}: widget not rendered ({text.strip()[:80]!r})")
    fallbacks = page.locator(".jp-OutputArea-output[data-mime-type='text/plain']").all_inner_texts()
    for text in fallbacks:
        if re.match(r"^(VBox|HBox|IntSlider|FloatSlider|FloatLogSlider|Dropdown)\(", text.strip()):
            problems.append(f"widget shown as plain text: {text.strip()[:80]!r}")
    return problems


def explorers(page):
    """Rendered explorer widgets: a widget output holding an image (the plot) and at least one control."""
    views = page.locator(".jp-OutputArea-output:has(.jupyter-widgets)")  # widget views carry no mime attribute
    return [views.nth(i) for i in range(views.count())
            if views.nth(i).locator("img").count() and views.nth(i).locator(".widget-slider, select").count()]


def move_a_control(view) -> bool:
    """Move one slider (keyboard on its handle) or pick another dropdown option; True if the view changed."""
    before = (view.locator("img").first.get_attribute("src"), view.inner_text())
    handles = view.locator(".noUi-handle")
    if handles.count():
        handle = handles.first
        handle.focus()
        for key in ("End", "Home", "ArrowRight", "ArrowRight"):
            handle.press(key)
            if _changed(view, before):
                return True
    for select in view.locator("select").all():
        options = select.locator("option").all_inner_texts()
        current = select.evaluate("s => s.options[s.selectedIndex].text")
        for option in options:
            if option != current:
                select.select_option(label=option)
                if _changed(view, before):
                    return True
    return False


def _changed(view, before, seconds: float = 10.0) -> bool:
    """Did the move redraw the plot? Waits for the picture (it arrives after the readout); a control that
    changes only the numbers counts once the picture has had its time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if view.locator("img").first.get_attribute("src") != before[0]:
            return True
        time.sleep(0.2)
    return view.inner_text() != before[1]
