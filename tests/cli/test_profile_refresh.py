"""``sparseloom profile WORKLOAD --refresh``: re-times a sample, reports drift, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from sparseloom.cli import cli

#: As tests/cli/test_profile.py: the fewest rounds and samples (the same cached profile).
QUICK = ("--repeats", "3", "--warmup", "1", "--samples", "12")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_refresh_reports_factors_and_keeps_an_undrifted_profile(tmp_path: Path) -> None:
    built = invoke("profile", "tiny", *QUICK)
    assert built.exit_code == 0, built.output
    result = invoke("profile", "tiny", *QUICK, "--refresh", "--refresh-sample", "2",
                    "--drift-threshold", "5", "--json", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    # --drift-threshold 5 (500%: nothing can drift here) is warned about on stderr.
    assert "Warning: --drift-threshold 5 means" in result.stderr
    record = json.loads(result.stdout)
    written = json.loads((tmp_path / "out" / "refresh.json").read_text())
    assert written["factors"] == record["factors"] and written["action"] == "none"
    assert (tmp_path / "out" / "profile").is_dir()
    assert record["action"] == "none" and record["sample"]["tiny"] == [[0, 0], [1, 0]]
    assert set(record["factors"]) == {"ov:CPU", "ort:CPU"}
    assert all(f > 0 for f in record["factors"].values())
    text = invoke("profile", "tiny", *QUICK, "--refresh", "--refresh-sample", "1",
                  "--drift-threshold", "5")
    assert text.exit_code == 0, text.output
    assert "re-timed 1 subgraph(s) of 1 task(s)" in text.output
    assert "nothing drifted; the profile is unchanged" in text.output


def test_refresh_errors_are_one_line() -> None:
    missing = invoke("profile", "tiny", "--repeats", "4", "--warmup", "1", "--refresh")
    assert missing.exit_code != 0
    assert "no cached profile of workload 'tiny'" in missing.output
    assert "Traceback" not in missing.output
    for args, fragment in ((("--drift-threshold", "0"), "--drift-threshold"),
                           (("--refresh-sample", "0"), "--refresh-sample"),
                           (("--refresh", "sometimes"), "--refresh"),
                           (("--refresh", "--validate"), "do not combine")):
        result = invoke("profile", "tiny", *QUICK, *args)
        assert result.exit_code == 2  # a usage error
        assert fragment in result.output, result.output


def test_options_of_another_mode_are_refused_not_ignored() -> None:
    """An option that the chosen mode would not read is a usage error that names it."""
    for args, fragment in (
            (("--drift-threshold", "0.3"), "--drift-threshold apply to --refresh only"),
            (("--refresh-sample", "2", "--refresh-rounds", "5"),
             "--refresh-sample, --refresh-rounds apply to --refresh only"),
            (("--redraws", "3"), "--redraws apply to --validate only"),
            (("--no-ablation",), "--no-ablation apply to --validate only"),
            (("--refresh", "--latency-samples", "9"), "--latency-samples apply to --validate"),
            (("--refresh", "--strict"), "--strict do not apply to --refresh"),
            (("--refresh", "--no-cache"), "--no-cache do not apply to --refresh")):
        result = invoke("profile", "tiny", *QUICK, *args)
        assert result.exit_code == 2, result.output  # refused before any work
        assert fragment in result.output, result.output
