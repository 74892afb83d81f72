#!/usr/bin/env bash
# Makes the Secret the chart's mTLS option mounts (tls.enabled=true): a CA,
# and one certificate it signs for the name every service presents and
# verifies (the chart's tls.serverName, by default FULLNAME.NAMESPACE.svc),
# usable as server and as client. Writes ca.crt, ca.key, tls.crt, tls.key and
# secret.yaml (type kubernetes.io/tls, keys tls.crt, tls.key, ca.crt) to
# OUTDIR; keep ca.key to sign client certificates for grpcurl.
#
#   hack/chart-tls-secret.sh FULLNAME NAMESPACE [OUTDIR]
#   kubectl -n NAMESPACE apply -f OUTDIR/secret.yaml
#   helm install ... --set tls.enabled=true --set tls.secretName=FULLNAME-mtls
#
#   SERVER_NAME  the certificate's DNS name  (default FULLNAME.NAMESPACE.svc)
#   SECRET_NAME  the Secret's name           (default FULLNAME-mtls)
#   DAYS         validity in days            (default 365)
#
# For production, let cert-manager issue and rotate the certificate instead
# (a CA Issuer and a Certificate with that dnsName and secretName).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
	sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d' >&2
	exit 2
fi
fullname=$1 namespace=$2 out=${3:-.}
server_name=${SERVER_NAME:-$fullname.$namespace.svc}
secret_name=${SECRET_NAME:-$fullname-mtls}
days=${DAYS:-365}
command -v openssl >/dev/null || { echo "chart-tls-secret: openssl is required" >&2; exit 1; }
mkdir -p "$out"
cd "$out"

umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
	-subj "/CN=tidal CA $fullname" -keyout ca.key -out ca.crt \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$server_name" \
	-keyout tls.key -out tls.csr 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out tls.crt \
	-extfile <(printf 'subjectAltName=DNS:%s\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' "$server_name") 2>/dev/null
rm -f tls.csr ca.srl

b64() { base64 -w0 < "$1"; }
cat > secret.yaml <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $secret_name
  namespace: $namespace
type: kubernetes.io/tls
data:
  tls.crt: $(b64 tls.crt)
  tls.key: $(b64 tls.key)
  ca.crt: $(b64 ca.crt)
YAML
echo "chart-tls-secret: $out/secret.yaml holds Secret $namespace/$secret_name for $server_name" >&2
echo "  helm flags: --set tls.enabled=true --set tls.secretName=$secret_name --set tls.serverName=$server_name" >&2
