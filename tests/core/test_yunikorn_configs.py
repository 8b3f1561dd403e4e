"""korral agrees with YuniKorn on 71 real queues.yaml files taken from YuniKorn's own repositories.

Each file in tests/data/yunikorn-configs says where it comes from and what YuniKorn makes of it
(`# yunikorn expects: valid|invalid (...)`); the folder it sits in says the same. korral must give the
same verdict, in its validator and when an RM registers with the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import korral
from korral import si
from korral.config import load_config

CONFIGS = Path(__file__).parents[1] / "data" / "yunikorn-configs"
# YuniKorn's parser tests pass these, with placement rules YuniKorn does not know (PrimaryGroup,
# Something); a partition built from them has no active rules and rejects every application. korral
# refuses them at load instead (issue 26; docs/api.md "YuniKorn 1.8 semantics").
STRICTER = {
    "core-config_test-TestParseRule-primarygroup-parent",
    "core-config_test-TestParseRule-regexp-filters",
}
ALL_VALID = sorted((CONFIGS / "valid").glob("*.yaml"))
VALID = [path for path in ALL_VALID if path.stem not in STRICTER]
REFUSED_BY_KORRAL_ONLY = [path for path in ALL_VALID if path.stem in STRICTER]
INVALID = sorted((CONFIGS / "invalid").glob("*.yaml"))


def verdict_in_file(path: Path) -> str:
    for line in path.read_text().splitlines()[:5]:
        if line.startswith("# yunikorn expects:"):
            return line.split(":", 1)[1].split()[0]
    raise AssertionError(f"{path.name} does not say what YuniKorn expects")


def test_the_folder_holds_the_71_files_each_filed_under_its_own_verdict() -> None:
    assert len(ALL_VALID) + len(INVALID) == 71 and len(REFUSED_BY_KORRAL_ONLY) == len(STRICTER)
    assert [p.name for p in ALL_VALID if verdict_in_file(p) != "valid"] == []
    assert [p.name for p in INVALID if verdict_in_file(p) != "invalid"] == []


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_the_validator_accepts_what_yunikorn_accepts(path: Path) -> None:
    load_config(path.read_text())


@pytest.mark.parametrize("path", REFUSED_BY_KORRAL_ONLY, ids=lambda p: p.stem)
def test_an_unknown_placement_rule_is_refused_where_yunikorn_would_reject_every_application(
    path: Path,
) -> None:
    with pytest.raises(korral.ConfigError, match="unknown placement rule name 'primarygroup'") as refused:
        load_config(path.read_text())
    # the refusal says it is korral's, stricter than YuniKorn, and what YuniKorn would do instead
    assert "korral is stricter than YuniKorn here: YuniKorn accepts this config" in str(refused.value)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_the_validator_refuses_what_yunikorn_refuses_and_says_why(path: Path) -> None:
    with pytest.raises(korral.ConfigError) as refused:
        load_config(path.read_text())
    assert str(refused.value).strip()


@pytest.fixture(scope="module")
def core() -> korral.Core:
    started = korral.start()
    yield started
    started.stop()


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_an_rm_registers_with_every_file_yunikorn_accepts(core: korral.Core, path: Path) -> None:
    text = path.read_text()
    rm_id = f"rm-{path.stem}"
    core.register_resource_manager(si.RegisterResourceManagerRequest(rm_id=rm_id, config=text))
    expected = {f"[{rm_id}]{p.name}" for p in load_config(text).partitions}
    assert expected <= set(core.partition_names())


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_an_rm_registering_with_a_file_yunikorn_refuses_gets_a_config_error(
    core: korral.Core, path: Path
) -> None:
    rm_id = f"rm-{path.stem}"
    request = si.RegisterResourceManagerRequest(rm_id=rm_id, config=path.read_text())
    with pytest.raises(korral.ConfigError):
        core.register_resource_manager(request)
    assert not [name for name in core.partition_names() if name.startswith(f"[{rm_id}]")]
