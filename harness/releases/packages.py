"""Which onnxruntime build a probe installs, from where, and which execution provider runs the model.

A `Package` is the distribution (`onnxruntime`, `onnxruntime-openvino`,
`onnxruntime-gpu`), the execution provider asked for (`--ep`, with
`--ep-option key=value`) and the wheel sources added to uv's configured index
(`--index-url`, `--find-links`; `--pre` lists development builds too).

The default (the `onnxruntime` wheel from the configured index, CPU provider)
adds nothing to a run's key, environment names or requests, so runs and
environments made before packages existed keep their ids and are reused. Any
other choice is part of the key (a run of another package or provider is
another run) and of the environment's name (a wheel from another source is
another environment). A source's credentials (harness.releases.credentials) are
in none of these: keys, provenance and environment names hold its URL redacted,
and uv is given the secret in its environment. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

from harness.releases.credentials import redact, uv_sources
from harness.vocabulary import (
    DEFAULT_BINDING,
    DEFAULT_EP,
    DEFAULT_PACKAGE,
    EP_EXTRAS,
    PACKAGES,
    PROVIDERS,
    binding_of,
)

#: numpy for the worker, a range every release supports: each from 1.19 asks numpy>=1.21.6 and imports with
#: numpy 2.x; the upper bound keeps a future major version, or one a --find-links folder plants, out
NUMPY = "numpy>=1.21.6,<3"
#: uv builds nothing: a source distribution's build script is code that would run at install (wheels only)
WHEELS_ONLY = ("--only-binary", ":all:")


@dataclass(frozen=True)
class Package:
    name: str = DEFAULT_PACKAGE
    ep: str = DEFAULT_EP
    ep_options: tuple[tuple[str, str], ...] = ()  # provider options, as given (key, value), sorted
    index_urls: tuple[str, ...] = ()  # simple indexes searched before uv's configured one
    find_links: tuple[str, ...] = ()  # directories (absolute) or URLs of pages of wheel links
    pre: bool = False  # list pre-releases and development builds too

    @property
    def provider(self) -> str:
        """onnxruntime's name of the execution provider asked for (CPUExecutionProvider...)."""
        return PROVIDERS[self.ep]

    @property
    def binding(self) -> str:
        """The API the package is called through: python (a wheel, installed by uv), node or web (npm)."""
        return binding_of(self.name)

    @property
    def from_npm(self) -> bool:
        return self.binding != DEFAULT_BINDING

    @property
    def sources(self) -> tuple[str, ...]:
        """Where wheels come from besides uv's configured index, in the order uv is given them (redacted)."""
        return tuple(redact(s) for s in (*self.index_urls, *self.find_links))

    def redacted(self) -> Package:
        """This package as records hold it: each source's credentials masked (what `of_key` gives back)."""
        return dataclasses.replace(self, index_urls=tuple(redact(u) for u in self.index_urls),
                                   find_links=tuple(redact(u) for u in self.find_links))

    @property
    def extras(self) -> tuple[str, ...]:
        """Extras installed with the wheel for this provider (the CUDA runtime for cuda)."""
        return EP_EXTRAS.get((self.name, self.ep), ())

    @property
    def is_default(self) -> bool:
        return self.key() == {}

    @property
    def label(self) -> str:
        """PACKAGE:EP, as `bisect compare` takes it."""
        return f"{self.name}:{self.ep}"

    def requirement(self, version: str) -> str:
        """What uv installs: `onnxruntime-gpu[cuda,cudnn]==1.24.1`."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={version}"

    def uv_args(self) -> tuple[list[str], dict[str, str]]:
        """uv's arguments and environment for the sources: each index before the configured one, each
        find-links location; a secret only in the environment."""
        return uv_sources(self.index_urls, self.find_links)

    def install_args(self, version: str) -> list[str]:
        """uv's (and pip's) arguments that install `version` and numpy from the sources, wheels only (a source's
        credentials are not among them: `uv_args()` gives them as uv's environment)."""
        return [*WHEELS_ONLY, *self.uv_args()[0], self.requirement(version), NUMPY]

    def env_name(self, version: str) -> str:
        """The directory name of an environment of `version`: the same wheel from the same sources, the same name."""
        base = f"{self.name}-{version}"
        if self.extras:
            base += "-" + "-".join(self.extras)
        if not self.sources:
            return base
        digest = hashlib.sha256(json.dumps(list(self.sources)).encode()).hexdigest()[:10]
        return f"{base}-{digest}"

    def providers_request(self) -> list | None:
        """The worker's `providers` ([[name, options]]), or None for the CPU provider with no options
        (the worker's own default, so a default probe's request is what it always was)."""
        if self.ep == DEFAULT_EP and not self.ep_options:
            return None
        return [[self.provider, dict(self.ep_options)]]

    def provenance(self) -> dict:
        """What a probe records of the package, always."""
        doc = {"package": self.name, "ep": self.ep}
        if self.from_npm:
            doc["binding"] = self.binding
        if self.ep_options:
            doc["ep_options"] = dict(self.ep_options)
        if self.index_urls:
            doc["index_urls"] = [redact(u) for u in self.index_urls]
        if self.find_links:
            doc["find_links"] = [redact(u) for u in self.find_links]
        return doc

    def key(self) -> dict:
        """What a run's key holds of the package: nothing for the default, else its provenance."""
        doc = self.provenance()
        if doc == {"package": DEFAULT_PACKAGE, "ep": DEFAULT_EP}:
            return {}
        return doc


#: the run-key / provenance keys a Package adds (after the runner's own)
KEYS = ("package", "ep", "binding", "ep_options", "index_urls", "find_links")


def of_key(key: dict, pre: bool = False) -> Package:
    """The package a run's key (or a probe's provenance) names; the default where it names none."""
    return Package(name=key.get("package") or DEFAULT_PACKAGE, ep=key.get("ep") or DEFAULT_EP,
                   ep_options=tuple(sorted((key.get("ep_options") or {}).items())),
                   index_urls=tuple(key.get("index_urls") or ()), find_links=tuple(key.get("find_links") or ()),
                   pre=pre)


def label_of(prov: dict) -> str | None:
    """PACKAGE:EP of a provenance or key that names a package other than the default, else None."""
    pkg = of_key(prov)
    return None if pkg.is_default else pkg.label


def known_eps(name: str) -> tuple[str, ...] | None:
    """The --ep words a known package runs, or None for a package the harness does not know."""
    return PACKAGES.get(name)


_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")
_BRANCH = re.compile(r"[A-Za-z0-9._/-]{1,100}")


def parse_build_info(text: str | None) -> dict:
    """The commit and branch in onnxruntime's `get_build_info()` text ("git-branch=rel-1.24.1,
    git-commit-id=470ae16099, ..."); None where it names none (a local build may not) or names
    something that is not one (the text comes back from a worker: a commit is 7 to 40 hex digits,
    lower-cased; a branch is a plain ref name)."""
    commit = re.search(r"git-commit-id=([^,\s]*)", text or "")
    branch = re.search(r"git-branch=([^,\s]*)", text or "")
    return {"commit": commit.group(1).lower() if commit and _COMMIT.fullmatch(commit.group(1)) else None,
            "branch": branch.group(1) if branch and _BRANCH.fullmatch(branch.group(1)) else None}
