"""The README's episode example writes a file that passes QA (so the docs stay true)."""

import hashlib
import os
import re
from pathlib import Path

from datasets.qa_checks import EpisodeExpectation, check_episode_file

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_episode_example_passes_qa(tmp_path):
    text = README.read_text()
    section = text[text.index("## Episode file format") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - our own documentation
    finally:
        os.chdir(cwd)
    data = (tmp_path / "episode.parquet").read_bytes()
    expected = EpisodeExpectation(
        size=len(data), sha256_hex=hashlib.sha256(data).hexdigest(), fps=30, action_dim=8
    )
    result = check_episode_file(tmp_path / "episode.parquet", expected)
    assert result.passed, result.failures
