"""Unit tests of bench/mpbench/report.py: how a benchmark's figures reach RESULTS.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from mpbench import report

PAGE = """# Benchmark results

Introduction, by hand.

<!-- bench:latency -->
## Latency: 200 trials

| command | git revision | date | machine |
|---|---|---|---|
| `python bench/old.py` | 1111111 | 2026-11-29 18:13 UTC | 2 cores |

old latency figures
<!-- /bench:latency -->

**Why.** Latency's explanation, by hand.

<!-- bench:soak -->
## Soak

old soak figures
<!-- /bench:soak -->

**Why.** Soak's explanation, by hand.
"""

RUN = report.Run(
    command="python bench/x.py --fast",
    revision="2222222",
    date="2026-12-02 15:40 UTC",
    machine="2 cores, 23.5 GiB",
)


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "RESULTS.md"
    path.write_text(PAGE)
    monkeypatch.setattr(report, "RESULTS", path)
    monkeypatch.setattr(report, "OUT", tmp_path / "out")
    return path


def test_a_rerun_replaces_its_own_block_and_nothing_else() -> None:
    block = report.section("latency", "Latency: 100 trials", "new latency figures\n", RUN)

    text = report.replace_section(PAGE, "latency", block)

    assert "old latency figures" not in text
    assert "python bench/old.py" not in text
    assert text.replace(block, "<block>") == PAGE.replace(
        PAGE[PAGE.index("<!-- bench:latency -->") : PAGE.index("<!-- /bench:latency -->")]
        + "<!-- /bench:latency -->",
        "<block>",
    )


def test_a_section_opens_with_its_heading_and_the_run_it_came_from() -> None:
    block = report.section("latency", "Latency: 100 trials", "new latency figures", RUN)

    lines = block.splitlines()
    assert lines[0] == "<!-- bench:latency -->"
    assert lines[1] == "## Latency: 100 trials"
    assert lines[3:6] == [
        "| command | git revision | date | machine |",
        "|---|---|---|---|",
        "| `python bench/x.py --fast` | 2222222 | 2026-12-02 15:40 UTC | 2 cores, 23.5 GiB |",
    ]
    assert lines[-2:] == ["new latency figures", "<!-- /bench:latency -->"]


def test_a_new_benchmark_goes_at_the_end_and_a_blank_page_holds_only_it() -> None:
    block = report.section("warmpool", "Warm pool", "figures", RUN)

    assert report.replace_section(PAGE, "warmpool", block) == PAGE + "\n" + block + "\n"
    assert report.replace_section("", "warmpool", block) == block + "\n"


def test_a_name_that_prefixes_another_replaces_only_its_own() -> None:
    page = "<!-- bench:scale-a -->\nA\n<!-- /bench:scale-a -->\n"
    page += "<!-- bench:scale -->\nS\n<!-- /bench:scale -->\n"

    text = report.replace_section(page, "scale", "<!-- bench:scale -->\nT\n<!-- /bench:scale -->")

    assert "\nA\n" in text
    assert "\nS\n" not in text
    assert "\nT\n" in text


def test_publish_rewrites_its_section_keeps_the_rest_and_the_raw_figures(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report.publish(
        "latency",
        "Latency: 200 trials",
        "new latency",
        "python bench/x.py",
        data={"p99": 1},
        results=True,
    )

    text = results.read_text()
    assert "new latency" in text
    assert "old latency figures" not in text
    assert "| `python bench/x.py` | " in text
    assert "(1/5/15 min) at the end |" in text  # how much else ran on the shared machine
    assert "**Why.** Latency's explanation, by hand." in text
    assert "<!-- bench:soak -->\n## Soak\n\nold soak figures\n<!-- /bench:soak -->" in text
    assert text.startswith("# Benchmark results\n\nIntroduction, by hand.\n")
    (raw,) = (results.parent / "out").glob("*-latency.json")
    assert json.loads(raw.read_text()) == {"p99": 1}
    assert "new latency" in capsys.readouterr().out


def test_publish_with_no_results_prints_and_leaves_results_alone(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = results.read_text()

    report.publish("latency", "Latency", "new latency", "python bench/x.py", results=False)

    assert results.read_text() == before
    assert not (results.parent / "out").exists()
    assert "new latency" in capsys.readouterr().out


def test_the_revision_says_when_the_measured_code_is_not_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*argv: str) -> None:
        subprocess.run(["git", *argv], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "RESULTS.md").write_text("figures\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    monkeypatch.setattr(report, "REPO", tmp_path)
    monkeypatch.setattr(report, "RESULTS", tmp_path / "bench" / "RESULTS.md")
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()

    # A benchmark that ran before rewrites RESULTS.md: the code is still the commit's.
    (tmp_path / "bench" / "RESULTS.md").write_text("new figures\n")
    assert report.git_revision() == f"git {sha}"

    (tmp_path / "code.py").write_text("x = 2\n")
    assert report.git_revision() == f"git {sha} + uncommitted changes"
