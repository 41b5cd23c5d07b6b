#!/usr/bin/env bash
# ctest Docs.ASlowServerIsWaitedFor: scripts/readme-examples.sh starts a document's client
# line only once its server listens. A server that takes seconds to listen (a TSan build on a
# loaded machine took more than the 0.5 s the runner used to sleep: "Connection refused", CI of
# 2026-11-27) is played by a wrapper that sleeps 3 s before it runs this build's rnic.
#
#   tests/readme_examples_slow_server.sh BUILD_DIR
set -euo pipefail
BUILD_DIR=$(cd "${1:?usage: readme_examples_slow_server.sh BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/slow-server-XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir "$W/build"
cat > "$W/build/rnic" <<WRAP
#!/usr/bin/env bash
case " \$* " in *" --server "*) sleep 3 ;; esac
exec "$BUILD_DIR/rnic" "\$@"
WRAP
chmod +x "$W/build/rnic"
cat > "$W/doc.md" <<'DOC'
```console
$ rnic ping --server &
$ rnic ping --client 127.0.0.1 --count 2
```
DOC
if out=$(bash "$HERE/scripts/readme-examples.sh" "$W/build" "$W/doc.md" 2>&1); then
  echo "$out"
  echo "ok: the client ran once its slow server listened"
else
  echo "$out"
  echo "FAILED: the runner did not wait for a server that listens after 3 s"
  exit 1
fi
