#!/usr/bin/env bash
# Makes a throwaway PKI for the TLS tests in DIR with openssl:
#   NAME-ca.crt/.key                 a CA (NAME = ca, other)
#   server.crt/.key                  signed by ca: localhost, 127.0.0.1, tandem-internal
#   client.crt/.key                  signed by ca (a client / peer identity)
#   rogue-client.crt/.key            signed by other (a client the workers must refuse)
#   server2.crt/.key                 signed by other (for the rotation test)
# Usage: make_test_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
days=2
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
    -subj "/CN=tandem test $1 CA" -keyout "$1-ca.key" -out "$1-ca.crt" 2>/dev/null
}
leaf() {  # NAME CA EXTENSIONS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$1" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2-ca.crt" -CAkey "$2-ca.key" -CAcreateserial \
    -days "$days" -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
server_ext='subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:tandem-internal
extendedKeyUsage=serverAuth,clientAuth'
client_ext='extendedKeyUsage=clientAuth'
ca ca
ca other
leaf server ca "$server_ext"
leaf client ca "$client_ext"
leaf rogue-client other "$client_ext"
leaf server2 other "$server_ext"
