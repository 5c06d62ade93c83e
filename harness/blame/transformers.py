"""Which graph transformers flip the first bad release: delta debugging over `disabled_optimizers`. Pure:
the probes are the caller's (`flips(names)`: is B good again with these disabled?).

onnxruntime's session option `disabled_optimizers` takes graph transformer names and rewrite rule names as
its source spells them (`GraphTransformer("SimplifiedLayerNormFusion", ...)`, `RewriteRule("GemmTransposeFusion")`)
and ignores names it does not know. The candidates come from B's own session log: first the transformers
that changed its graph, then (a load error stops the session inside the transformer that failed, which logs
nothing) every one that ran. A rule-based transformer (`Level1_RuleBasedTransformer`) is one name for many
rewrite rules, and disabling it by that name leaves its rules running (1.29.0, GemmTransposeFusion): where one
ran, the rules the release's binary has are candidates beside it, so the rule itself is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from harness.search import ddmin

# The level-1 rewrite rules by the names their constructors give (onnxruntime's
# onnxruntime/core/optimizer/graph_transformer_utils.cc, GenerateRewriteRules, 1.19 to 1.30); which of them a
# release has is read from its binary before they are tried.
REWRITE_RULES = (
    "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
    "CastElimination", "CastChainElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion",
    "FuseReluClip", "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion",
    "ConvBNFusion", "ClipQuantRewrite", "ReluQuantRewrite", "Pad_Fusion", "MatMul_BatchNormalization_Fusion",
    "LabelEncoderFusion",
)
RULE_BASED = re.compile(r"Level\d_RuleBasedTransformer")


@dataclass
class Stage:
    over: str  # "changed the graph" | "ran" | "rules of Level1_RuleBasedTransformer"
    names: list[str]
    flipped: bool  # B good with all of them disabled

    def document(self) -> dict:
        return {"over": self.over, "names": self.names, "flipped": self.flipped}


@dataclass
class Found:
    transformers: list[str] | None  # the minimal set whose disabling makes B good; None: no set does
    stages: list[Stage] = field(default_factory=list)
    tried: int = 0  # distinct sets tried

    @property
    def flips(self) -> bool:
        return self.transformers is not None


def minimal_set(modified: Sequence[str], ran: Sequence[str], rules: Sequence[str],
                flips: Callable[[tuple[str, ...]], bool]) -> Found:
    """The smallest set of names whose disabling makes B good (1-minimal, by delta debugging), or None.

    `modified`/`ran`: transformers of B's session log; `rules`: the rewrite rules B's binary has;
    `flips(names)`: B's verdict with `names` disabled is good. Each distinct set is asked once."""
    asked: dict[frozenset, bool] = {}

    def flips_once(names) -> bool:
        key = frozenset(names)
        if key not in asked:
            asked[key] = bool(flips(tuple(sorted(key))))
        return asked[key]

    found = Found(None)
    previous: set[str] = set()
    # a rule-based transformer's rules are disabled by their own names (its name alone does not reach them)
    stages = (("changed the graph", _with_rules(modified, rules)), ("ran", _with_rules([*modified, *ran], rules)))
    for over, names in stages:
        if not names or set(names) == previous:
            continue
        previous = set(names)
        flipped = flips_once(names)
        found.stages.append(Stage(over, names, flipped))
        if not flipped:
            continue
        minimal = ddmin(names, flips_once)
        found.transformers = _rules_named(minimal, rules, flips_once, found)
        break
    found.tried = len(asked)
    return found


def _rules_named(minimal: list[str], rules: Sequence[str], flips: Callable, found: Found) -> list[str]:
    """`minimal` with each rule-based transformer replaced by the fewest of its rules that flip as well."""
    named = list(minimal)
    for name in minimal:
        if not RULE_BASED.fullmatch(name) or not rules:
            continue
        rest = [n for n in named if n != name]
        candidates = _unique(rules)
        flipped = flips([*rest, *candidates])
        found.stages.append(Stage(f"rules of {name}", candidates, flipped))
        if flipped:
            chosen = ddmin(candidates, lambda subset: flips([*rest, *subset]))
            named = [*rest, *chosen]
    return named


def _with_rules(names: Sequence[str], rules: Sequence[str]) -> list[str]:
    """`names`, each rule-based transformer followed by the rewrite rules it may have applied."""
    out: list[str] = []
    for n in names:
        out.append(n)
        if RULE_BASED.fullmatch(n or ""):
            out.extend(rules)
    return _unique(out)


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(n for n in names if n))
