"""Issue 26 end to end through korral.Core: nothing in queues.yaml accepted that does nothing."""

from __future__ import annotations

import logging

import pytest
from core_helpers import FAST, SINGLE_LEAF, add_apps, part, running

import korral
from korral import si
from korral import testing as t

UNKNOWN_RULE = """
partitions:
  - name: default
    placementrules:
      - name: namespaces
        create: true
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: namespaces
            parent: true
"""

DEFAULTED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
            properties:
              application.sort.policy: fiar
              priority.offset: high
          - name: b
            properties:
              application.sort.policy: FAIR
"""


def test_an_unknown_placement_rule_is_a_config_error_at_registration_and_reload() -> None:
    """It was accepted, and the whole rule list then silently became `provided`."""
    with korral.start(**FAST) as core:
        with pytest.raises(korral.ConfigError, match="unknown placement rule name 'namespaces'"):
            core.register_resource_manager(t.register("rm", UNKNOWN_RULE), t.RecordingRM("rm"))
        assert core.partition_names() == []
    with running(SINGLE_LEAF) as (core, rm):
        with pytest.raises(korral.ConfigError, match="unknown placement rule name 'namespaces'"):
            core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=UNKNOWN_RULE))
        add_apps(core, rm, {"app": "root.singleleaf"})  # the old config still runs
        assert core.application(part(), "app").queue == "root.singleleaf"


def test_defaulted_values_run_as_yunikorn_runs_them_and_registration_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="korral.config"), running(DEFAULTED) as (core, _):
        queues = {q.path: q for q in core.queues(part())}
        # YuniKorn: an unknown sort policy (sort policies are case-sensitive) sorts fifo
        assert queues["root.a"].sort_policy == "fifo" and queues["root.b"].sort_policy == "fifo"
        lines = [r.getMessage() for r in caplog.records if r.name == "korral.config"]
        assert len(lines) == 1
        assert "RM rm: 3 queue property value(s) YuniKorn silently defaults" in lines[0]
        for value in ("'fiar'", "'high'", "'FAIR'"):
            assert value in lines[0]
        caplog.clear()
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=DEFAULTED.replace("fiar", "fair"))
        )
        core.wait_until_idle()
        assert core.queue(part(), "root.a").sort_policy == "fair"
        lines = [r.getMessage() for r in caplog.records if r.name == "korral.config"]
        assert len(lines) == 1 and "2 queue property value(s)" in lines[0]


def test_a_clean_config_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="korral.config"), running(SINGLE_LEAF):
        pass
    assert [r for r in caplog.records if r.name == "korral.config"] == []
