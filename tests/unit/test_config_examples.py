"""queues.yaml loading of the documented examples (yunikorn-site queue_config.md, acls.md, placement seed)."""

from __future__ import annotations

import pytest
from config_helpers import assert_rejected, dedent, find

from korral.config import ChildTemplateConfig, PlacementRuleConfig, ResourcesConfig, load_config

# --- documented examples (yunikorn-site queue_config.md, acls.md, placement-rules seed) ---

QUEUE_CONFIG_NAMESPACES = """
partitions:
  - name: default
    queues:
      - name: namespaces
        parent: true
        maxapplications: 12
        resources:
          guaranteed:
            {memory: 1G, vcore: 10}
          max:
            {memory: 10G, vcore: 100}
        queues:
          - name: level1
            maxapplications: 8
            resources:
              guaranteed:
                {memory: 500M, vcore: 5}
              max:
                {memory: 5G, vcore: 50}
"""

QUEUE_CONFIG_CHILD_TEMPLATE = """
 partitions:
   - name: default
     placementrules:
       - name: provided
         create: true
     queues:
       - name: root
         submitacl: '*'
         childtemplate:
           maxapplications: 10
           properties:
             application.sort.policy: fifo
           resources:
             guaranteed:
               vcore: 1
               memory: 1G
             max:
               vcore: 20
               memory: 600G
         queues:
           - name: parent
             parent: true
             childtemplate:
               resources:
                 max:
                   vcore: 21
                   memory: 610G
           - name: notemplate
             parent: true
"""

QUEUE_CONFIG_LIMITS = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: team
            limits:
              - limit: "example entry"
                maxapplications: 10
                users:
                - sue
                - bob
"""

SEED_PROVIDED = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
        parent:
          name: user
          create: true
    queues:
      - name: root
        submitacl: '*'
"""

SEED_USER = """
partitions:
  - name: default
    placementrules:
      - name: user
        create: false
    queues:
      - name: root
        queues:
          - name: finance_dot_test
"""

SEED_FIXED = """
partitions:
  - name: default
    placementrules:
      - name: fixed
        value: last_resort
    queues:
      - name: root
        queues:
          - name: last_resort
"""

SEED_TAG = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
"""

# The guide's first complex example, parent rules spelled as one-entry lists as the guide writes them.
SEED_COMPLEX = """
partitions:
  - name: default
    placementrules:
      - name: user
        create: true
        filter:
          type: allow
          groups:
            - dev*
        parent:
          - name: tag
            value: namespace
      - name: tag
        value: namespace
        create: true
        parent:
          - name: fixed
            value: root.namespaces
            filter:
              type: allow
              users:
                - john
      - name: fixed
        value: root.default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: namespaces
            parent: true
          - name: default
"""

SEED_PRODUCTION = """
partitions:
- name: default
  queues:
  - name: production
    submitacl: john,bob
  placementrules:
  - name: fixed
    value: root.production
  - name: user
    create: true
"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(QUEUE_CONFIG_NAMESPACES, id="queue-config-namespaces"),
        pytest.param(QUEUE_CONFIG_CHILD_TEMPLATE, id="queue-config-child-template"),
        pytest.param(QUEUE_CONFIG_LIMITS, id="queue-config-limits"),
        pytest.param(SEED_PROVIDED, id="seed-provided"),
        pytest.param(SEED_USER, id="seed-user"),
        pytest.param(SEED_FIXED, id="seed-fixed"),
        pytest.param(SEED_TAG, id="seed-tag"),
        pytest.param(SEED_COMPLEX, id="seed-complex"),
        pytest.param(SEED_PRODUCTION, id="seed-production"),
    ],
)
def test_documented_examples_load(text: str) -> None:
    config = load_config(text)
    assert config.partitions[0].root.name == "root"


def test_documented_namespaces_example_values() -> None:
    config = load_config(QUEUE_CONFIG_NAMESPACES)
    namespaces = find(config, "root.namespaces")
    assert namespaces.is_parent and namespaces.max_applications == 12
    assert namespaces.resources.guaranteed == {"memory": 10**9, "vcore": 10_000}
    level1 = find(config, "root.namespaces.level1")
    assert level1.resources.max == {"memory": 5 * 10**9, "vcore": 50_000}
    assert not level1.is_parent


def test_documented_child_template_example_values() -> None:
    config = load_config(QUEUE_CONFIG_CHILD_TEMPLATE)
    template = config.partitions[0].root.child_template
    assert template == ChildTemplateConfig(
        max_applications=10,
        properties={"application.sort.policy": "fifo"},
        resources=ResourcesConfig(
            guaranteed={"vcore": 1000, "memory": 10**9}, max={"vcore": 20_000, "memory": 600 * 10**9}
        ),
    )
    assert find(config, "root.notemplate").child_template is None
    parent_template = find(config, "root.parent").child_template
    assert parent_template is not None
    assert parent_template.resources.max == {"vcore": 21_000, "memory": 610 * 10**9}


def test_documented_complex_example_rules() -> None:
    rules = load_config(SEED_COMPLEX).partitions[0].placement_rules
    assert [rule.name for rule in rules] == ["user", "tag", "fixed"]
    assert rules[0].filter.groups == ("dev*",)
    assert rules[0].parent == PlacementRuleConfig(name="tag", value="namespace")
    assert rules[1].parent is not None and rules[1].parent.filter.users == ("john",)


def test_documented_fixed_example_needs_the_queue() -> None:
    # the guide's fixed rule has no create flag, so root.last_resort must be configured as a leaf
    assert_rejected(
        SEED_FIXED.replace("        queues:\n          - name: last_resort\n", ""),
        "references non-existing queues (root.last_resort) and create is 'false'",
    )


def test_documented_partition_example_with_string_nodesortpolicy_is_rejected() -> None:
    # queue_config.md shows `nodesortpolicy: fair`; YuniKorn's strict parser refuses a string there
    text = dedent(
        """
        partitions:
          - name: default
            nodesortpolicy: fair
            preemption:
              enabled: false
            queues:
              - name: root
        """
    )
    assert_rejected(text, "nodesortpolicy", "expected a map")
