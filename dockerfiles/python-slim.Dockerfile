# Probe image for the docker backend: only CPython 3.11 and the native
# libraries onnxruntime wheels link against (libgomp1, libstdc++6).
#
# onnxruntime + numpy for the target architecture are NOT installed here: the
# runner mounts a site-packages folder read-only at /site (PYTHONPATH=/site),
# so one image per architecture serves every release.
#
# BASE defaults to the official slim Python image (where a registry is
# reachable). Without a registry, harness/runners/docker_engine.py builds a
# local substitute from a debootstrap root filesystem and passes
#   --build-arg BASE=ortbisect/bookworm-python:<arch>
ARG BASE=python:3.11-slim
FROM ${BASE}

# python3 must resolve to CPython 3.11 (python:3.11-slim: /usr/local/bin;
# the debootstrap base: /usr/bin/python3 -> python3.11), and the non-root
# user "probe" (uid 1000) is available to runners that want it.
RUN set -e; \
    if ! command -v python3 >/dev/null 2>&1; then ln -s python3.11 /usr/bin/python3; fi; \
    python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'; \
    if ! id probe >/dev/null 2>&1; then useradd --uid 1000 --user-group --create-home --shell /bin/sh probe; fi

ENV PYTHONPATH=/site \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONNOUSERSITE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8

WORKDIR /tmp
CMD ["python3"]
