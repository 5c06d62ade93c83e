"""Credentials in a wheel source's URL: kept in memory and given to uv only through its environment.

An index or find-links URL may carry a secret (`https://user:TOKEN@host/simple`).
Nothing the harness writes or prints holds it: `redact` masks the userinfo of every
URL in a text (`user:****@`), and every record, document, page and message takes
URLs through it. uv gets a source holding a secret in its environment
(UV_INDEX, UV_FIND_LINKS), never in argv, which every local user can read.
Pure: no I/O.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

MASK = "****"
# scheme://userinfo@ : the userinfo is what comes before '@' in the authority (no '/', '?', '#', space)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s'\"<>]*)@")


def redact(text: str) -> str:
    """`text` with the secret of each URL's userinfo masked: user:TOKEN@ becomes user:****@, TOKEN@ ****@."""
    def mask(m: re.Match) -> str:
        user, colon, _ = m.group(2).partition(":")
        return f"{m.group(1)}{user}:{MASK}@" if colon else f"{m.group(1)}{MASK}@"
    return _USERINFO.sub(mask, text)


def has_secret(url: str) -> bool:
    """Whether a URL carries userinfo (a user, a password or a token) that is not already masked."""
    try:
        parsed = urlparse(url)
    except ValueError:
        return False
    return bool(parsed.scheme and "@" in parsed.netloc) and redact(url) != url


def uv_sources(index_urls: tuple[str, ...], find_links: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """uv's (arguments, environment) for the sources, in the order given. A flag whose values carry a secret
    goes whole into its environment variable (uv reads the variable only when the flag is absent):
    UV_INDEX, space-separated; UV_FIND_LINKS, comma-separated."""
    args: list[str] = []
    env: dict[str, str] = {}
    for flag, variable, sep, values in (("--index", "UV_INDEX", " ", index_urls),
                                        ("--find-links", "UV_FIND_LINKS", ",", find_links)):
        if any(has_secret(v) for v in values):
            env[variable] = sep.join(values)
        else:
            for v in values:
                args += [flag, v]
    return args, env
