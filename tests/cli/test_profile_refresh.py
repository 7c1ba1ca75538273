"""``sparseloom profile WORKLOAD --refresh``: re-times a sample, reports drift, clear errors."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from sparseloom.cli import cli

#: As tests/cli/test_profile.py: the fewest rounds and samples (the same cached profile).
QUICK = ("--repeats", "3", "--warmup", "1", "--samples", "12")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_refresh_reports_factors_and_keeps_an_undrifted_profile() -> None:
    built = invoke("profile", "tiny", *QUICK)
    assert built.exit_code == 0, built.output
    result = invoke("profile", "tiny", *QUICK, "--refresh", "--refresh-sample", "2",
                    "--drift-threshold", "5", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
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
