"""End-to-end tests of ``korral validate-config`` through click's CliRunner."""

from __future__ import annotations

from pathlib import Path

import cli_helpers
import pytest
from cli_helpers import BUNDLED_EXAMPLE, SHIM_CONFIGMAP, flat, write_config
from click.testing import CliRunner

from korral.cli import main

# the shared fixture: pytest finds a fixture by its name in the test module
runner = cli_helpers.runner


# ---- validate-config -------------------------------------------------------------------------------


def test_validate_config_accepts_the_bundled_example(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate-config", str(BUNDLED_EXAMPLE)])
    assert result.exit_code == 0, result.output
    # the README promises exactly this: `OK` and exit 0 (the command prints no summary of the queues)
    assert result.output == "OK\n"


BROKEN_CONFIGS = {
    "bad-quantity": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: production
            resources:
              guaranteed: {memory: 48Gx, vcore: 24}
""",
        ["queue 'root.production'", "guaranteed", "'48Gx'", "'memory'"],
    ),
    "duplicate-queue-names": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: team
            parent: true
            queues:
              - name: alpha
              - name: Alpha
""",
        ["queue 'root.team'", "duplicate child name", "'alpha'"],
    ),
    "guaranteed-above-max": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            resources:
              guaranteed: {memory: 10Gi}
              max: {memory: 5Gi}
""",
        ["queue 'root.a'", "guaranteed resource", "larger than maximum resource"],
    ),
    "misspelt-key": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            maxaplications: 3
""",
        ["queue 'root.a'", "unknown key 'maxaplications'"],
    ),
    "resources-on-root": (
        """
partitions:
  - name: gpu
    queues:
      - name: root
        resources:
          max: {memory: 1Gi}
""",
        ["partition 'gpu'", "root queue must not have resource limits"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CONFIGS))
def test_validate_config_rejects_a_broken_file_and_names_what_is_wrong(
    runner: CliRunner, tmp_path: Path, case: str
) -> None:
    text, expected_fragments = BROKEN_CONFIGS[case]
    result = runner.invoke(main, ["validate-config", str(write_config(tmp_path, text))])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: "), result.output
    assert "OK" not in result.output
    for fragment in expected_fragments:
        assert fragment in result.output, (fragment, result.output)


def test_validate_config_reports_a_yaml_syntax_error_with_its_line(runner: CliRunner, tmp_path: Path) -> None:
    broken = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n"
        "        resources: {max: {memory: 1\n",
    )
    result = runner.invoke(main, ["validate-config", str(broken)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: invalid YAML"), result.output
    # where the parser found the problem, and where the mapping it was reading began
    assert "begun at line 5" in result.output, result.output
    # the parser read a string: the error still names the file the user gave
    assert f'in "{broken}", line 6' in result.output, result.output
    assert "<unicode string>" not in result.output
    assert result.output.count("\n") == 1, result.output  # one line, as every error (api.md)


def test_validate_config_errors_go_to_stderr_and_ok_to_stdout(runner: CliRunner, tmp_path: Path) -> None:
    text, _ = BROKEN_CONFIGS["misspelt-key"]
    result = runner.invoke(main, ["validate-config", str(write_config(tmp_path, text))])
    assert result.exit_code == 1
    assert result.stdout == ""  # `korral validate-config bad.yaml 2>/dev/null` prints nothing
    assert result.stderr.startswith("invalid: ") and "unknown key 'maxaplications'" in result.stderr
    ok = runner.invoke(main, ["validate-config", str(BUNDLED_EXAMPLE)])
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "OK\n", "")


def test_validate_config_reads_standard_input_for_a_dash(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate-config", "-"], input=BUNDLED_EXAMPLE.read_text())
    assert (result.exit_code, result.stdout) == (0, "OK\n"), result.output
    broken = runner.invoke(main, ["validate-config", "-"], input="partitions: [{name: default, queues: [\n")
    assert broken.exit_code == 1, broken.output
    assert broken.stderr.startswith("invalid: invalid YAML") and 'in "<stdin>", line' in broken.stderr


def test_validate_config_accepts_the_shims_configmap_and_checks_the_queues_inside(
    runner: CliRunner, tmp_path: Path
) -> None:
    configmap = write_config(tmp_path, SHIM_CONFIGMAP, "yunikorn-configs.yaml")
    result = runner.invoke(main, ["validate-config", str(configmap)])
    assert (result.exit_code, result.stdout) == (0, "OK\n"), result.output
    # the queues inside are validated as strictly as a queues.yaml (here a misspelt key)
    broken = SHIM_CONFIGMAP.replace("submitacl: '*'", "submitacl: '*'\n            maxaplications: 3")
    result = runner.invoke(main, ["validate-config", "-"], input=broken)
    assert result.exit_code == 1, result.output
    assert "queue 'root'" in result.stderr and "unknown key 'maxaplications'" in result.stderr
    # and the help says a ConfigMap is welcome
    assert 'data."queues.yaml"' in flat(runner.invoke(main, ["validate-config", "--help"]).output)


@pytest.mark.parametrize(
    ("document", "hint"),
    [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: yunikorn-defaults}\ndata:\n  log.level: '0'\n",
            'a Kubernetes ConfigMap without data."queues.yaml" (its data keys: log.level)',
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: yunikorn-scheduler}\n",
            "a Kubernetes Deployment, not a queues.yaml: give the queues.yaml, or the ConfigMap that "
            'holds it under data."queues.yaml"',
        ),
    ],
    ids=["configmap-without-queues", "deployment"],
)
def test_validate_config_says_what_to_give_for_other_kubernetes_objects(
    runner: CliRunner, tmp_path: Path, document: str, hint: str
) -> None:
    path = write_config(tmp_path, document, "object.yaml")
    result = runner.invoke(main, ["validate-config", str(path)])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert flat(result.stderr) == f"invalid: {path} is {hint}" + (
        "; YuniKorn's shim reads the queues from that key" if "without" in hint else ""
    )
    assert "unknown key 'apiVersion'" not in result.stderr


def test_validate_config_refuses_a_missing_file_before_reading_it(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-queues.yaml"
    result = runner.invoke(main, ["validate-config", str(missing)])
    assert result.exit_code == 2, result.output  # click's usage error, not the validator's exit 1
    assert "Usage: " in result.output
    assert "does not exist" in result.output
    assert "invalid: " not in result.output


def test_validate_config_refuses_a_directory(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["validate-config", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "is a directory" in result.output


def test_validate_config_reports_a_file_that_is_not_text_as_invalid(
    runner: CliRunner, tmp_path: Path
) -> None:
    binary = tmp_path / "queues.yaml"
    binary.write_bytes(b"\xff\xfe\x00partitions: []\n")
    result = runner.invoke(main, ["validate-config", str(binary)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: "), result.output
