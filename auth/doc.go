// Package auth makes and loads the keys that authenticate weft processes to
// each other, and turns them into the transport's Security (mutual TLS 1.3).
//
// # Keys
//
// A cluster has one certificate authority: an ed25519 key (ca.key) and a
// self-signed X.509 certificate (ca.crt). Every process holds a bundle, a
// directory with
//
//	ca.crt          the cluster CA certificate (PEM)
//	node.crt        this node's certificate, signed by the CA (PEM)
//	node.key        this node's ed25519 private key (PKCS#8 PEM), mode 0600
//	capability.key  meta and storage bundles only, mode 0600: 64 hex digits,
//	                the 32-byte HMAC key of data capabilities; the same in
//	                every meta and storage bundle of a cluster
//
// The CA's private key (ca.key, mode 0600) stays in the CA directory, which
// also holds capability.key (the source of the copies Issue puts in server
// bundles) and ca.crt. It is needed only to issue more bundles: keep it off
// the cluster's machines.
//
// A node certificate says what the node is allowed to be: its role
// (transport.RoleClient, RoleStorage or RoleMeta) in the Subject's
// OrganizationalUnit as "weft-role=ROLE" (exactly one such value), and its
// name (a host name, free text) as the Subject's CommonName. Certificates
// are valid for 10 years (validity), the CA's too: weft has no renewal or
// revocation; re-key a cluster by making a new CA and new bundles. Loss of
// a key: make a new cluster key set and redistribute (see docs/security.md).
//
// # Invariants
//
//   - Load accepts a bundle only if every file it needs is there, every
//     private key file has no group or other permission bits, node.crt is
//     signed by the bundle's ca.crt and currently valid, node.key matches
//     node.crt, and a meta or storage bundle has a 32-byte capability.key.
//   - NewCA, Issue and GenerateCluster never overwrite an existing key or
//     certificate file; they write private keys with mode 0600.
//
// # Threat model
//
// An attacker on the network without a bundle can connect but not complete
// a handshake: the server requires a client certificate signed by the
// cluster CA, and the client requires the server's certificate to be signed
// by it too and to carry a server role (storage or meta), so a stolen client
// bundle can never impersonate a server. Roles need asymmetric keys for
// that: with a shared secret held by clients, any client could act as a
// server. Authentication happens once per connection; without wire
// encryption (the default) an attacker able to inject into TCP streams could
// hijack an authenticated connection afterwards (see transport.Security).
// Anyone who can read a bundle's node.key is that node; anyone who can read
// capability.key can forge data capabilities; anyone with ca.key can make
// any bundle.
package auth
