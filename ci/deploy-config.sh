#!/bin/sh
# Deploys the next signed route config to a `routeval serve` on this machine
# (systemd, a VM, anything but Kubernetes, whose ConfigMap swap does the
# same), the config, its signature and the router it pins together, in one
# rename:
#
#   ci/deploy-config.sh NEW.json LIVE PUBKEY [ROUTER]
#
# NEW.json is `route-config.vN.json` with its `.minisig` beside it. LIVE is
# the link serve reads through: `serve --config LIVE/route-config.json
# --router LIVE/router.bin`. Each release is a directory of its own under
# `releases/` beside LIVE, written whole before LIVE is switched to it by a
# rename, so serve never sees a config without its signature (copying the
# config, then its `.minisig`, over the old ones makes serve refuse the
# config it saw first) nor a router other than the one the config pins.
# ROUTER is the `router.bin` NEW pins; without it the live release's router
# goes on, and either must be the one NEW pins (its sha256). NEW must verify
# with PUBKEY and follow the live config (`routeval verify --previous`): the
# next version, its parent the live file. A release that exists is never
# replaced. Each release is readable by every user (0755, files 0644), so
# the unit's dynamic user reads what root deployed; nothing in it is a
# secret. With ROUTEVAL_SERVE_FLAGS set, `routeval serve --check` must
# accept the release before the switch. `ROUTEVAL` names the binary
# (`routeval`).
set -eu

if [ $# -ne 3 ] && [ $# -ne 4 ]; then
  echo "usage: $0 NEW.json LIVE PUBKEY [ROUTER]" >&2
  exit 2
fi
new=$1
live=$2
pubkey=$3
router=${4:-}
routeval=${ROUTEVAL:-routeval}
releases=$(dirname "$live")/releases
name=$(basename "$new" .json)
release=$releases/$name

if [ -e "$live/route-config.json" ]; then
  "$routeval" verify "$new" --pubkey "$pubkey" --previous "$live/route-config.json"
else
  "$routeval" verify "$new" --pubkey "$pubkey"
fi
if [ -e "$release" ]; then
  echo "error: $release exists; a release is never replaced" >&2
  exit 2
fi
if [ -z "$router" ] && [ -e "$live/router.bin" ]; then
  router=$live/router.bin
fi
# A config that pins the built-in router names its sha256; the router that
# goes with it must be that one.
if grep -q '"builtin"' "$new"; then
  if [ -z "$router" ]; then
    echo "error: $new pins a built-in router and none was given: pass ROUTER (the router.bin the gate pinned)" >&2
    exit 2
  fi
  digest=$(sha256sum "$router" | cut -d' ' -f1)
  if ! grep -q "\"sha256\": *\"$digest\"" "$new"; then
    echo "error: $router (sha256 $digest) is not the router $new pins" >&2
    exit 2
  fi
fi
mkdir -p -m 0755 "$releases"
incoming=$(mktemp -d "$releases/.incoming.XXXXXX")
cp "$new" "$incoming/route-config.json"
cp "$new.minisig" "$incoming/route-config.json.minisig"
if [ -n "$router" ]; then
  cp "$router" "$incoming/router.bin"
fi
chmod 0644 "$incoming"/*
chmod 0755 "$incoming"
# What serve would refuse at its reload (a route's key variable not set, a
# keys file it cannot read, a records directory of another config) is
# refused here, before the switch: `serve --check` on the release as it
# stands, with serve's other flags from ROUTEVAL_SERVE_FLAGS (as the unit
# passes them: `--keys … --records …`) and the environment serve gets.
if [ -n "${ROUTEVAL_SERVE_FLAGS:-}" ]; then
  set -- --config "$incoming/route-config.json" --pubkey "$pubkey"
  if [ -e "$incoming/router.bin" ]; then
    set -- "$@" --router "$incoming/router.bin"
  fi
  # shellcheck disable=SC2086 # serve's flags are words
  if ! "$routeval" serve --check "$@" $ROUTEVAL_SERVE_FLAGS >&2; then
    rm -r "$incoming"
    echo "error: serve --check refused $new; nothing was deployed" >&2
    exit 2
  fi
  checked="serve --check passed"
else
  checked="serve --check not run: set ROUTEVAL_SERVE_FLAGS to serve's other flags"
fi
mv "$incoming" "$release"
ln -s "releases/$name" "$live.next"
mv -T "$live.next" "$live"
echo "deployed $name: $live -> releases/$name ($checked)"
