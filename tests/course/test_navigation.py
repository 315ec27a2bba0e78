"""Can a learner walk the course: does each lesson link back and forward, and the README link every lesson?"""

import json
import re
import shutil
from pathlib import Path

from mlsys_lab.course.navigation import add_navigation, navigation_markdown

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def navigation_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells
            if c.get("metadata", {}).get("mlsys_lab", {}).get("role") == "navigation"]


def test_every_lesson_links_to_its_neighbours():
    for index, path in enumerate(LESSONS):
        cells = navigation_cells(path)
        assert len(cells) == 2, f"{path.name}: expected a navigation line at the top and the bottom"
        links = re.findall(r"\]\(([^)#]+)", cells[0])
        expected = {p.name for p in LESSONS[max(index - 1, 0):index + 2] if p != path} | {LESSONS[0].name}
        assert set(links) == expected, f"{path.name} links {links}"
        assert cells[0] == cells[1] == navigation_markdown(LESSONS, index)


def test_adding_navigation_twice_changes_nothing(tmp_path):
    for path in LESSONS[:3]:
        shutil.copy(path, tmp_path / path.name)
    add_navigation(tmp_path)
    first = {p.name: p.read_text() for p in tmp_path.glob("*.ipynb")}
    add_navigation(tmp_path)
    assert first == {p.name: p.read_text() for p in tmp_path.glob("*.ipynb")}


def test_readme_course_map_links_every_lesson():
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\(notebooks/(\d\d_[\w]+\.ipynb)\)", readme))
    assert linked == {p.name for p in LESSONS}
