#!/usr/bin/env bash
# Cloudburst first-boot script for NodeClaim ml/gpu-burst-x7k2q.
# Rendered by activities/bootstrap.py from bootstrap.sh.tmpl; runs once as cloud-init user
# data on Ubuntu 22.04/24.04 or Debian 12 and joins the VM to the cluster as a node.
# It holds a join token (and a Tailscale auth key): it lives in a Secret, is never logged,
# and the token expires on its own.
#
# Every step is logged with a timestamp to /var/log/cloudburst-bootstrap.log. A failure stops
# the script with a non-zero exit and a last log line naming the step. Re-running it is safe:
# a finished step leaves a marker in /var/lib/cloudburst/steps and is skipped, and once the
# node has joined a re-run exits 0 at once.
#
# CLOUDBURST_ROOT (default: empty, meaning /) prefixes every file the script reads or writes,
# so that an operator can dry-run it into a scratch directory (with the commands it calls
# replaced by stand-ins on PATH) and read what it would write.
set -Eeuo pipefail
# Files are world-readable by default (apt's sandbox user must read keyrings and lists);
# the few that hold secrets are created private explicitly.
umask 022

NODE_NAME=gpu-burst-x7k2q
K8S_VERSION=1.34.3
K8S_MINOR=1.34
TAILSCALE_ENABLED=true
TAILSCALE_AUTHKEY='<TAILSCALE-AUTH-KEY from Secret ml/tailscale-auth key authkey>'
# The cloud whose instance metadata service tells this VM who it is, for the kubelet's
# --provider-id ('' when none does: the fake cloud, or a provider not known at render time),
# and the region to name where that service does not tell it (OVH, Proxmox, Redfish).
PROVIDER=hetzner
REGION=''
# kubeadm's kubeletExtraArgs form: `list` (v1beta4) or `map` (v1beta3).
KUBELET_ARGS_FORM=list

ROOT=${CLOUDBURST_ROOT:-}
ROOT=${ROOT%/}
LOG=$ROOT/var/log/cloudburst-bootstrap.log
STEPS=$ROOT/var/lib/cloudburst/steps
RUN_DIR=$ROOT/run/cloudburst
JOIN_CONFIG=$ROOT/etc/kubernetes/kubeadm-join.yaml
STEP=start
NODE_IP=""
TS_KEY_FILE=""
METADATA=""
INSTANCE_REGION=""
INSTANCE_ID=""
PROVIDER_ID=""

mkdir -p "${LOG%/*}" "$STEPS"
touch "$LOG"
chmod 600 "$LOG"
exec > >(tee -a "$LOG") 2>&1
LOG_PID=$!
# Never `set -x`: the trace would print the token and the auth key.

log() { printf '%s cloudburst-bootstrap [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$STEP" "$*"; }

on_error() {
  local rc=$1 line=$2
  if [ "$BASH_SUBSHELL" -gt 0 ]; then
    exit "$rc" # a command substitution failed: its caller reports it
  fi
  trap - ERR
  log "FAILED in step '$STEP' (exit $rc, line $line); see /var/log/cloudburst-bootstrap.log"
  exit "$rc"
}

on_exit() {
  local rc=$?
  # Secrets on disk only while they are needed, whatever happened.
  rm -f "$JOIN_CONFIG" ${TS_KEY_FILE:+"$TS_KEY_FILE"}
  # Let tee write out the last lines before the script ends.
  exec >&- 2>&-
  wait "$LOG_PID" 2>/dev/null || true
  exit "$rc"
}
trap 'on_error $? $LINENO' ERR
trap on_exit EXIT

# step NAME FUNCTION: run FUNCTION unless NAME finished on an earlier run, then mark it done.
step() {
  local name=$1
  shift
  STEP=$name
  if [ -e "$STEPS/$name" ]; then
    log "done on an earlier run; skipping"
    return 0
  fi
  log "starting"
  "$@"
  touch "$STEPS/$name"
  log "done"
}

# retry ATTEMPTS COMMAND...: network fetches on a fresh VM fail now and then.
retry() {
  local attempts=$1 attempt=1 delay=2
  shift
  until "$@"; do
    if [ "$attempt" -ge "$attempts" ]; then
      log "$1 failed $attempt times; giving up"
      return 1
    fi
    log "$1 failed (attempt $attempt of $attempts); retrying in ${delay}s"
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2))
    if [ "$delay" -gt 60 ]; then
      delay=60
    fi
  done
}

export DEBIAN_FRONTEND=noninteractive
# cloud-init and unattended-upgrades may hold the dpkg lock at first boot.
APT=(apt-get -y -q -o DPkg::Lock::Timeout=600
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

apt_update_install() {
  "${APT[@]}" update && "${APT[@]}" install "$@"
}

apt_install() {
  retry 5 apt_update_install "$@"
}

# --- the steps ------------------------------------------------------------------------------

check_os() {
  if [ ! -r "$ROOT/etc/os-release" ]; then
    log "no /etc/os-release: cannot tell which distribution this is"
    return 1
  fi
  # shellcheck disable=SC1091
  . "$ROOT/etc/os-release"
  OS_ID=${ID:-}
  OS_CODENAME=${VERSION_CODENAME:-}
  case "$OS_ID:${VERSION_ID:-}" in
    ubuntu:22.04 | ubuntu:24.04 | debian:12) ;;
    ubuntu:* | debian:*)
      log "warning: $OS_ID ${VERSION_ID:-?} is untested (tested: Ubuntu 22.04/24.04, Debian 12)"
      ;;
    *)
      log "unsupported distribution '${OS_ID:-unknown}': use Ubuntu 22.04/24.04 or Debian 12"
      return 1
      ;;
  esac
  if [ -z "$OS_CODENAME" ]; then
    log "/etc/os-release has no VERSION_CODENAME"
    return 1
  fi
  log "$OS_ID ${VERSION_ID:-} ($OS_CODENAME)"
}

set_hostname() {
  hostnamectl set-hostname "$NODE_NAME" || printf '%s\n' "$NODE_NAME" >"$ROOT/etc/hostname"
  touch "$ROOT/etc/hosts"
  if ! grep -qE "[[:space:]]$NODE_NAME([[:space:]]|\$)" "$ROOT/etc/hosts"; then
    printf '127.0.1.1 %s\n' "$NODE_NAME" >>"$ROOT/etc/hosts"
  fi
}

install_base_packages() {
  apt_install ca-certificates curl gpg
  install -d -m 0755 "$ROOT/etc/apt/keyrings" "$ROOT/etc/apt/sources.list.d"
}

# metadata URL [CURL-OPTION...]: one item of this VM's instance metadata service, into
# $METADATA. Link-local, so never through a proxy; short timeouts, and retried: a service
# may not answer in a boot's first seconds.
metadata() {
  local url=$1 file=$RUN_DIR/instance-metadata
  shift
  install -d -m 0700 "$RUN_DIR"
  : >"$file" # curl -o writes no file for an empty answer
  if ! retry 5 curl -fsS --noproxy '*' --connect-timeout 2 --max-time 5 "$@" -o "$file" "$url"; then
    log "the $PROVIDER instance metadata service did not answer $url"
    return 1
  fi
  METADATA=$(cat "$file")
  rm -f "$file"
}

# json_string KEY...: the string at that path of the JSON document in $METADATA, '' if none.
# python3 is there: cloud-init, which runs this script, is written in it.
json_string() {
  printf '%s' "$METADATA" | python3 -c '
import json, sys
try:
    value = json.load(sys.stdin)
except ValueError:
    value = None
for key in sys.argv[1:]:
    value = value.get(key) if isinstance(value, dict) else None
print(value if isinstance(value, str) else "")
' "$@"
}

# read_identity: INSTANCE_REGION and INSTANCE_ID as activities/providers/<cloud>.py records
# them (its instance ids are <provider>/<region or zone>/<native id>), from each cloud's
# documented metadata endpoints.
read_identity() {
  local imds=http://169.254.169.254 token query
  case "$PROVIDER" in
    aws)
      # IMDSv2: a session token first (PUT), then each item with it. Region and InstanceId.
      metadata "$imds/latest/api/token" -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300'
      token=$METADATA
      metadata "$imds/latest/meta-data/placement/region" -H "X-aws-ec2-metadata-token: $token"
      INSTANCE_REGION=$METADATA
      metadata "$imds/latest/meta-data/instance-id" -H "X-aws-ec2-metadata-token: $token"
      INSTANCE_ID=$METADATA
      ;;
    gcp)
      # The zone (answered as projects/<number>/zones/<zone>) and the instance name.
      metadata "$imds/computeMetadata/v1/instance/zone" -H 'Metadata-Flavor: Google'
      INSTANCE_REGION=${METADATA##*/}
      metadata "$imds/computeMetadata/v1/instance/name" -H 'Metadata-Flavor: Google'
      INSTANCE_ID=$METADATA
      ;;
    azure)
      # The VM's location and name; format=text answers a leaf's bare value.
      query='api-version=2021-02-01&format=text'
      metadata "$imds/metadata/instance/compute/location?$query" -H 'Metadata: true'
      INSTANCE_REGION=$METADATA
      metadata "$imds/metadata/instance/compute/name?$query" -H 'Metadata: true'
      INSTANCE_ID=$METADATA
      ;;
    hetzner)
      # The server id, and its datacenter (fsn1-dc14), whose location (fsn1) the API names.
      metadata "$imds/hetzner/v1/metadata/availability-zone"
      INSTANCE_REGION=${METADATA%-dc*}
      metadata "$imds/hetzner/v1/metadata/instance-id"
      INSTANCE_ID=$METADATA
      ;;
    scaleway)
      # The server's id and zone (fr-par-1).
      metadata 'http://169.254.42.42/conf?format=json'
      INSTANCE_ID=$(json_string id)
      INSTANCE_REGION=$(json_string location zone_id)
      ;;
    digitalocean)
      # The droplet's id and region slug.
      metadata "$imds/metadata/v1/region"
      INSTANCE_REGION=$METADATA
      metadata "$imds/metadata/v1/id"
      INSTANCE_ID=$METADATA
      ;;
    ovh)
      # OpenStack's instance uuid; its metadata names no region, the rendered one stands.
      metadata "$imds/openstack/latest/meta_data.json"
      INSTANCE_ID=$(json_string uuid)
      INSTANCE_REGION=$REGION
      ;;
    plugin)
      # No metadata service: the plug-in's own first-boot handling wrote the machine's
      # providerID (plugin:///<region>/<id>, api/plugin.py) here before this script runs.
      if ! METADATA=$(cat "$ROOT/etc/cloudburst/provider-id" 2>/dev/null); then
        log "the plug-in wrote no /etc/cloudburst/provider-id (docs/providers.md)"
        return 1
      fi
      case $METADATA in
        plugin:///*) METADATA=${METADATA#plugin:///} ;;
        *)
          log "/etc/cloudburst/provider-id holds no plugin:///<region>/<id> providerID"
          return 1
          ;;
      esac
      INSTANCE_REGION=${METADATA%%/*}
      INSTANCE_ID=${METADATA#*/}
      ;;
    proxmox)
      # A Proxmox VM has no metadata service: its SMBIOS serial is its VM id (smbios1
      # serial=<vmid>, set by activities/providers/proxmox.py); the cluster is rendered.
      if ! METADATA=$(cat "$ROOT/sys/class/dmi/id/product_serial" 2>/dev/null); then
        log "cannot read /sys/class/dmi/id/product_serial (the VM's SMBIOS serial)"
        return 1
      fi
      INSTANCE_ID=$METADATA
      INSTANCE_REGION=$REGION
      ;;
    redfish)
      # A bare-metal machine's name is in the cloud-init seed it booted with (meta-data
      # cloudburst-machine, activities/providers/redfish.py); the site is rendered.
      if ! METADATA=$(cat "$ROOT/run/cloud-init/instance-data.json" 2>/dev/null); then
        log "cannot read /run/cloud-init/instance-data.json (cloud-init's instance data)"
        return 1
      fi
      INSTANCE_ID=$(json_string ds meta_data cloudburst-machine)
      INSTANCE_REGION=$REGION
      ;;
    *)
      log "no instance metadata lookup for provider '$PROVIDER'"
      return 1
      ;;
  esac
}

find_provider_id() {
  if [ -z "$PROVIDER" ]; then
    log "no metadata service to ask (fake cloud, or no provider known when rendered):" \
      "the kubelet registers without --provider-id"
    return 0
  fi
  read_identity
  PROVIDER_ID="$PROVIDER:///$INSTANCE_REGION/$INSTANCE_ID"
  # What the claim compares with its instance; also safe inside the join YAML's quotes.
  if [[ ! $PROVIDER_ID =~ ^[a-z]+:///[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$ ]]; then
    log "the $PROVIDER instance metadata service gave no usable identity" \
      "(region '${INSTANCE_REGION:0:80}', id '${INSTANCE_ID:0:80}')"
    return 1
  fi
  log "provider ID is $PROVIDER_ID"
}

install_tailscale() {
  local repo="https://pkgs.tailscale.com/stable/$OS_ID"
  local keyring=/etc/apt/keyrings/tailscale-archive-keyring.gpg
  retry 5 curl -fsSL "$repo/$OS_CODENAME.noarmor.gpg" -o "$ROOT$keyring"
  chmod 0644 "$ROOT$keyring"
  printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$repo" "$OS_CODENAME" \
    >"$ROOT/etc/apt/sources.list.d/tailscale.list"
  apt_install tailscale
  systemctl enable --now tailscaled
}

join_tailnet() {
  # The key goes through a root-only file, not argv, so `ps` cannot show it.
  install -d -m 0700 "$RUN_DIR"
  TS_KEY_FILE=$(mktemp "$RUN_DIR/tailscale-authkey.XXXXXX")
  printf '%s' "$TAILSCALE_AUTHKEY" >"$TS_KEY_FILE"
  retry 5 tailscale up --auth-key="file:$TS_KEY_FILE" --hostname="$NODE_NAME" --timeout=120s
  rm -f "$TS_KEY_FILE"
}

primary_ipv4() {
  # The source address of the default route: what the node is reached on without a tailnet.
  ip -4 -o route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p'
}

find_node_ip() {
  local _
  if [ "$TAILSCALE_ENABLED" = true ]; then
    log "waiting for the tailnet IPv4 address"
  else
    log "finding the primary IPv4 address (no tailnet configured)"
  fi
  for _ in $(seq 1 90); do
    if [ "$TAILSCALE_ENABLED" = true ]; then
      NODE_IP=$(tailscale ip -4 2>/dev/null | head -n1) || NODE_IP=""
    else
      NODE_IP=$(primary_ipv4 2>/dev/null | head -n1) || NODE_IP=""
    fi
    if [[ $NODE_IP =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
      log "node IP is $NODE_IP"
      return 0
    fi
    sleep 2
  done
  log "no IPv4 address after 180s"
  return 1
}

configure_kernel() {
  install -d -m 0755 "$ROOT/etc/modules-load.d" "$ROOT/etc/sysctl.d"
  printf 'overlay\nbr_netfilter\n' >"$ROOT/etc/modules-load.d/cloudburst-k8s.conf"
  modprobe overlay
  modprobe br_netfilter
  cat >"$ROOT/etc/sysctl.d/99-cloudburst-k8s.conf" <<'EOF'
net.bridge.bridge-nf-call-iptables  = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward                 = 1
EOF
  sysctl -q -p "$ROOT/etc/sysctl.d/99-cloudburst-k8s.conf"
}

disable_swap() {
  swapoff -a
  if [ -f "$ROOT/etc/fstab" ]; then
    # Comment out swap entries (third field `swap`) so that a reboot does not bring it back.
    sed -i.cloudburst-bak -E \
      's/^([^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap([[:space:]]|$))/#\1/' \
      "$ROOT/etc/fstab"
  fi
}

install_containerd() {
  apt_install containerd
  install -d -m 0755 "$ROOT/etc/containerd"
  containerd config default >"$ROOT/etc/containerd/config.toml"
  # kubeadm configures the kubelet for the systemd cgroup driver: containerd must match.
  sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' "$ROOT/etc/containerd/config.toml"
  if ! grep -q 'SystemdCgroup = true' "$ROOT/etc/containerd/config.toml"; then
    log "containerd's default config has no SystemdCgroup setting to turn on"
    return 1
  fi
  systemctl restart containerd
  systemctl enable containerd
}

install_kubernetes() {
  local repo="https://pkgs.k8s.io/core:/stable:/v$K8S_MINOR/deb/"
  local keyring=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
  install -d -m 0700 "$RUN_DIR"
  retry 5 curl -fsSL "${repo}Release.key" -o "$RUN_DIR/kubernetes-release.key"
  gpg --batch --yes --dearmor -o "$ROOT$keyring" "$RUN_DIR/kubernetes-release.key"
  chmod 0644 "$ROOT$keyring"
  rm -f "$RUN_DIR/kubernetes-release.key"
  printf 'deb [signed-by=%s] %s /\n' "$keyring" "$repo" \
    >"$ROOT/etc/apt/sources.list.d/kubernetes.list"
  apt_install "kubelet=$K8S_VERSION-*" "kubeadm=$K8S_VERSION-*" "kubectl=$K8S_VERSION-*"
  apt-mark hold kubelet kubeadm kubectl
  systemctl enable --now kubelet
}

configure_kubelet() {
  # Read by kubeadm's kubelet drop-in: the node is reached on this address.
  install -d -m 0755 "$ROOT/etc/default"
  printf 'KUBELET_EXTRA_ARGS=--node-ip=%s\n' "$NODE_IP" >"$ROOT/etc/default/kubelet"
}

# kubelet_extra_arg NAME VALUE: one kubeletExtraArgs entry, in the form of the join
# configuration's apiVersion; VALUE needs no YAML escaping (find_provider_id checks it).
kubelet_extra_arg() {
  if [ "$KUBELET_ARGS_FORM" = list ]; then
    printf '    - {name: "%s", value: "%s"}\n' "$1" "$2"
  else
    printf '    "%s": "%s"\n' "$1" "$2"
  fi
}

join_cluster() {
  if [ -e "$ROOT/etc/kubernetes/pki/ca.crt" ]; then
    log "an earlier join attempt left state behind: kubeadm reset"
    kubeadm reset -f
  fi
  install -d -m 0755 "$ROOT/etc/kubernetes"
  # Created private first: `cat >` keeps the mode of an existing file.
  install -m 0600 /dev/null "$JOIN_CONFIG"
  # kubeletExtraArgs stays the last block: the provider ID is appended to it below.
  cat >"$JOIN_CONFIG" <<'CLOUDBURST_JOIN_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "100.64.0.1:6443"
    token: "<BOOTSTRAP-TOKEN: created per claim at launch>"
    caCertHashes: ["<CA-CERT-HASH: sha256 of the cluster CA public key, read from kube-public/cluster-info at launch; pass --ca-cert to fill it in>"]
nodeRegistration:
  name: "gpu-burst-x7k2q"
  criSocket: "unix:///var/run/containerd/containerd.sock"
  taints: [{key: "nvidia.com/gpu", value: "true", effect: "NoSchedule"}, {key: "dedicated", effect: "PreferNoSchedule"}, {key: "cloudburst.io/unregistered", value: "true", effect: "NoSchedule"}]
  kubeletExtraArgs:
    - {name: "node-labels", value: "cloudburst.io/capacity-type=on-demand,cloudburst.io/instance-type=cx22,cloudburst.io/nodeclaim=gpu-burst-x7k2q,cloudburst.io/nodepool=gpu-burst,cloudburst.io/nodepool-namespace=ml,cloudburst.io/provider=hetzner,cloudburst.io/region=fsn1,example.com/tier=batch,karpenter.sh/capacity-type=on-demand,team=ml"}
CLOUDBURST_JOIN_CONFIG
  if [ -n "$PROVIDER_ID" ]; then
    kubelet_extra_arg provider-id "$PROVIDER_ID" >>"$JOIN_CONFIG"
  fi
  kubeadm join --config "$JOIN_CONFIG"
  # The token has done its job; do not leave it on disk.
  rm -f "$JOIN_CONFIG"
}

# --- the run --------------------------------------------------------------------------------

if [ -e "$STEPS/join" ] || [ -e "$ROOT/etc/kubernetes/kubelet.conf" ]; then
  log "node $NODE_NAME has already joined the cluster; nothing to do"
  exit 0
fi
log "bootstrapping node $NODE_NAME (Kubernetes $K8S_VERSION)"
STEP=os
check_os
step hostname set_hostname
step base-packages install_base_packages
# Not a step with a marker: a re-run needs the provider ID again for its join.
STEP=provider-id
find_provider_id
if [ "$TAILSCALE_ENABLED" = true ]; then
  step tailscale-install install_tailscale
  step tailscale-up join_tailnet
fi
unset TAILSCALE_AUTHKEY
STEP=node-ip
find_node_ip
step kernel configure_kernel
step swap disable_swap
step containerd install_containerd
step kubernetes-packages install_kubernetes
STEP=kubelet-config
configure_kubelet
step join join_cluster
STEP=finished
log "node $NODE_NAME joined the cluster"
