"""The documentation: a README of at most 200 lines over docs/ pages that
mkdocs builds without a warning (a broken link or anchor, a page missing
from the navigation)."""

import os
import re
import subprocess
import sys

from tests.cli.tool_main import ROOT

README_MAX_LINES = 200


def test_the_readme_is_at_most_200_lines():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


def test_the_readme_links_to_pages_that_exist():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    targets = {target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", text)}
    missing = [target for target in targets if not os.path.exists(os.path.join(ROOT, target))]
    assert not missing, missing


def test_mkdocs_builds_the_pages_strictly(tmp_path):
    # Not --quiet: it drops the warnings before --strict counts them.
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", os.path.join(ROOT, "mkdocs.yml"), "--site-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.path.exists(tmp_path / "architecture" / "index.html")
