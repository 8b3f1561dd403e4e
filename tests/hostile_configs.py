"""queues.yaml texts past each bound of a configuration (docs/api.md, "Bounds of a configuration"), and
the valid 100,000-queue config that RM A registers in the tests of issue 22 point 4.

Each hostile text is small to send (except the oversize one) and refused by its bound: the name of the
bound is in ``LIMIT_WORDS`` so a test can check the error names it.
"""

from __future__ import annotations

from korral.config import MAX_CONFIG_BYTES, MAX_QUEUES


def alias_bomb() -> str:
    """A 'billion laughs' in a queue's properties: 9 nested levels of 9 aliases each (~9^9 nodes)."""
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        properties:"]
    lines.append('          l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]')
    for level in range(1, 10):
        lines.append(f"          l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep_flow(depth: int = 2000) -> str:
    """Queues nested ``depth`` deep, written in flow style (what the issue's 2,000-deep config was)."""
    inner = "{name: leaf}"
    for level in range(depth):
        inner = f"{{name: q{level}, queues: [{inner}]}}"
    return f"partitions:\n  - name: default\n    queues:\n      - name: root\n        queues: [{inner}]\n"


def deep_block(queue_levels: int = 60) -> str:
    """Queues nested in block style: each queue level is two YAML levels (a map and its queues list)."""
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root"]
    indent = "        "
    for level in range(queue_levels):
        lines += [f"{indent}queues:", f"{indent}  - name: q{level}"]
        indent += "    "
    return "\n".join(lines) + "\n"


def oversize() -> str:
    """One byte over the size limit, all of it a comment after a valid config."""
    head = "partitions:\n  - name: default\n    queues:\n      - name: root\n# "
    return head + "x" * (MAX_CONFIG_BYTES + 1 - len(head))


def too_many_queues() -> str:
    """MAX_QUEUES + 1000 queues in a few kilobytes: 1,000 leaves shared by alias under enough parents."""
    parents = MAX_QUEUES // 1000 + 1
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        queues:"]
    lines.append("          - name: p0")
    lines.append("            queues: &leaves")
    lines += [f"              - name: q{leaf}" for leaf in range(1000)]
    lines += [f"          - {{name: p{parent}, queues: *leaves}}" for parent in range(1, parents)]
    return "\n".join(lines) + "\n"


def many_queues(count: int = 100_000) -> str:
    """A valid config of ``count`` queues besides root: parents of 99 leaves each (plain text, no alias)."""
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        queues:"]
    made = 0
    parent = 0
    while made < count:
        lines += [f"          - name: p{parent}", "            queues:"]
        made += 1
        leaves = min(99, count - made) or 1
        lines += [f"              - name: q{parent}x{leaf}" for leaf in range(leaves)]
        made += leaves
        parent += 1
    return "\n".join(lines) + "\n"


HOSTILE = {
    "alias-bomb": alias_bomb,
    "nested-2000-deep": deep_flow,
    "nested-block-120-deep": deep_block,
    "oversize": oversize,
    "too-many-queues": too_many_queues,
}
# a word of each refusal that names the bound it met
LIMIT_WORDS = {
    "alias-bomb": "alias",
    "nested-2000-deep": "nested too deep",
    "nested-block-120-deep": "nested too deep",
    "oversize": "too large",
    "too-many-queues": "too many queues",
}
