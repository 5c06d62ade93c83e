"""What onnxruntime's verbose session log says: which graph transformers ran, which changed the graph,
and where each node was placed. Pure text parsing; the log is read as untrusted input (bounded, every
name checked to be a plain identifier before it is used as one).

The lines it reads (onnxruntime 1.19 to 1.30 alike, `log_severity_level=0` on the session):

    [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer SimplifiedLayerNormFusion modified: 0 with status: OK
    [V:onnxruntime:, session_state.cc:1263 VerifyEachNodeIsAssignedToAnEp]  All nodes placed on [CPUExecutionProvider]. Number of nodes: 653
    [V:onnxruntime:, session_state.cc:1263 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 2
      Add (/model/layers.0/Add)
      MatMul (/model/layers.0/MatMul)

A transformer runs once per pass and level, so a name may appear many times; it changed the graph when any
of its lines says `modified: 1`. A session that failed while a transformer ran has no line for that one: the
last line before the error names the one that ran before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOG_LIMIT = 8 << 20  # bytes of a session log read back; a real one is tens of KB
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRANSFORMER = re.compile(r"GraphTransformer ([A-Za-z0-9_.:-]{1,200}) modified: ([01]) with status: (\S+)")
_ALL_ON = re.compile(r"All nodes placed on \[([A-Za-z0-9_]{1,100})\]\. Number of nodes: (\d+)")
_SOME_ON = re.compile(r"Node\(s\) placed on \[([A-Za-z0-9_]{1,100})\]\. Number of nodes: (\d+)")
_PLACED_NODE = re.compile(r"^\s+([A-Za-z0-9_.]{1,200}) \((.*)\)\s*$")
_LOG_PREFIX = re.compile(r"^\S+ \S+ \[[VIWEF]:onnxruntime")


@dataclass
class SessionLog:
    ran: list[str] = field(default_factory=list)  # graph transformers that ran, first run first
    modified: list[str] = field(default_factory=list)  # those that changed the graph at least once
    failed: list[str] = field(default_factory=list)  # those that returned a status other than OK
    all_on: str | None = None  # every node on this provider
    placements: dict[str, str] = field(default_factory=dict)  # node name -> provider, when nodes are split
    node_counts: dict[str, int] = field(default_factory=dict)  # provider -> nodes placed on it
    truncated: bool = False

    def provider_of(self, node: str) -> str | None:
        return self.placements.get(node) or self.all_on

    def document(self) -> dict:
        return {"ran": self.ran, "modified": self.modified, "failed": self.failed, "all_on": self.all_on,
                "node_counts": self.node_counts, "truncated": self.truncated}


def parse(text: str) -> SessionLog:
    """The transformers and node placements a verbose session log names."""
    log = SessionLog(truncated=len(text) > LOG_LIMIT)
    ran: dict[str, bool] = {}
    current: str | None = None  # the provider whose node list is being read
    for raw in text[:LOG_LIMIT].splitlines():
        line = _ANSI.sub("", raw)
        m = _TRANSFORMER.search(line)
        if m:
            name, modified, status = m.groups()
            ran[name] = ran.get(name, False) or modified == "1"
            if status.rstrip(".") != "OK" and name not in log.failed:
                log.failed.append(name)
            current = None
            continue
        m = _ALL_ON.search(line)
        if m:
            log.all_on, current = m.group(1), None
            log.node_counts[m.group(1)] = int(m.group(2))
            continue
        m = _SOME_ON.search(line)
        if m:
            current = m.group(1)
            log.node_counts[current] = int(m.group(2))
            continue
        if current is not None and not _LOG_PREFIX.match(line):
            node = _PLACED_NODE.match(line)
            if node:
                log.placements.setdefault(node.group(2), current)
                continue
        current = None if _LOG_PREFIX.match(line) else current
    log.ran = list(ran)
    log.modified = [n for n, changed in ran.items() if changed]
    return log


def read(path) -> SessionLog | None:
    """The log at `path` parsed (None when there is none): read as bytes, at most LOG_LIMIT and a byte more."""
    try:
        with open(path, "rb") as f:
            data = f.read(LOG_LIMIT + 1)
    except OSError:
        return None
    return parse(data.decode("utf-8", "replace"))
