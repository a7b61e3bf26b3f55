# attnscope: the web app and JSON API on the shipped model, with the transformers, gguf, vision and
# audio extras (a mounted transformers folder, GGUF file or image-text model serves as well).
#
#   docker build -t attnscope .                      # CPU build of torch (default)
#   docker run -p 8000:8000 attnscope                # then open http://127.0.0.1:8000
#
#   docker build -t attnscope:cuda --build-arg TORCH_INDEX_URL=https://pypi.org/simple .
#   docker run --gpus all -p 8000:8000 attnscope:cuda   # ATTNSCOPE_DEVICE=auto picks cuda
#
# Build arguments:
#   BASE_IMAGE       a Debian bookworm image with Python 3.11 and its venv module
#                    (python:3.11-slim; scripts/container_check.sh passes a local one)
#   TORCH_VERSION    the torch release, the same one CI tests
#   TORCH_INDEX_URL  where torch comes from: the CPU index by default; PyPI (CUDA 13.0 for
#                    torch 2.13 on Linux) or a download.pytorch.org/whl/cuXYZ index for CUDA
#   PIP_NO_INDEX     1 = install only from the wheels in wheels/ (offline build)

ARG BASE_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- build: a venv in /opt/venv
FROM ${BASE_IMAGE} AS build

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_NO_INDEX=0

ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN python3 -m venv /opt/venv

# wheels/ holds nothing but a README in a normal checkout; the offline check fills it
COPY wheels/ /wheels/

# torch first, from its own index, so that the CPU or CUDA build is the one chosen here and
# `pip install .` below finds torch already satisfied
RUN pip install --no-cache-dir --find-links /wheels --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /src
COPY pyproject.toml README.md constraints.txt __init__.py __main__.py ./
COPY app/ app/
COPY model/ model/
COPY frontend/ frontend/
# a regular (non-editable) install: code, shipped checkpoint and static files go to site-packages;
# the versions CI tested (constraints.txt), and the extras for the models people mount: transformers
# (the other families), gguf (GGUF files: gguf + accelerate), vision (image-text models: Pillow),
# audio (speech models: soundfile with its own libsndfile, soxr)
RUN grep -v '^torch==' constraints.txt > /tmp/constraints.txt \
    && pip install --no-cache-dir --find-links /wheels -c /tmp/constraints.txt ".[transformers,gguf,vision,audio]" \
    && python3 -c "import attnscope.app, attnscope.frontend, attnscope.model, gguf, accelerate, PIL, soundfile, soxr" \
    && echo installed

# ---------------------------------------------------------------- runtime: base + the venv
FROM ${BASE_IMAGE}

ENV PATH=/opt/venv/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ATTNSCOPE_HOST=0.0.0.0 \
    ATTNSCOPE_PORT=8000 \
    ATTNSCOPE_DEVICE=auto \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1

RUN useradd --no-log-init --create-home --home-dir /home/attnscope --uid 10001 --user-group attnscope

COPY --from=build /opt/venv /opt/venv

USER 10001:10001
WORKDIR /home/attnscope

EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ATTNSCOPE_PORT', '8000'), timeout=4)"]

# `docker run IMAGE` serves; `docker run IMAGE inspect "some text" --json` runs any other command
ENTRYPOINT ["attnscope"]
CMD ["serve"]
