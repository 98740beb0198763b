#!/bin/sh
# Deploys the next signed route config to a `routeval serve` on this machine
# (systemd, a VM, anything but Kubernetes, whose ConfigMap swap does the
# same), the config and its signature together, in one rename:
#
#   ci/deploy-config.sh NEW.json LIVE PUBKEY
#
# NEW.json is `route-config.vN.json` with its `.minisig` beside it. LIVE is
# the link serve reads through: `serve --config LIVE/route-config.json`.
# Each release is a directory of its own under `releases/` beside LIVE,
# written whole before LIVE is switched to it by a rename, so serve never
# sees a config without its signature (copying the config, then its
# `.minisig`, over the old ones makes serve refuse the config it saw first).
# NEW must verify with PUBKEY and follow the live config (`routeval verify
# --previous`): the next version, its parent the live file. A release that
# exists is never replaced. `ROUTEVAL` names the binary (`routeval`).
set -eu

if [ $# -ne 3 ]; then
  echo "usage: $0 NEW.json LIVE PUBKEY" >&2
  exit 2
fi
new=$1
live=$2
pubkey=$3
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
mkdir -p "$releases"
incoming=$(mktemp -d "$releases/.incoming.XXXXXX")
cp "$new" "$incoming/route-config.json"
cp "$new.minisig" "$incoming/route-config.json.minisig"
mv "$incoming" "$release"
ln -s "releases/$name" "$live.next"
mv -T "$live.next" "$live"
echo "deployed $name: $live -> releases/$name"
