#!/usr/bin/env bash
# System packages the dispatch tests need (Debian 12, as root): sshd, SLURM and munge.
# Idempotent: installs only what is missing. The daemons themselves are started (on
# loopback, in temp dirs) and stopped by the fixtures in tests/dispatch/conftest.py.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || missing+=(munge)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
command -v flock >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# No systemd: the packages' postinst scripts may have started daemons on the default
# ports; the tests run their own and do not need these.
mkdir -p /run/sshd
echo "dispatch services: sshd $(/usr/sbin/sshd -V 2>&1 | head -n1), $(slurmctld -V)"
