package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/weft-fs/weft/transport"
)

// Security returns the transport security of this bundle: mutual TLS 1.3
// with the node's certificate, peers verified against the bundle's CA (no
// host-name check: cluster certificates are not per host; the client
// checks the server's role instead), peers identified by the role and name
// in their certificates. encrypt asks for wire encryption (a server
// requires it, a client requests it).
func (k *Keys) Security(encrypt bool) *transport.Security {
	roots := x509.NewCertPool()
	roots.AddCert(k.ca)
	cert := tls.Certificate{Certificate: [][]byte{k.certDER}, PrivateKey: k.key, Leaf: k.cert}
	verifyServer := func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			return errors.New("auth: server sent no certificate")
		}
		c, err := x509.ParseCertificate(rawCerts[0])
		if err != nil {
			return fmt.Errorf("auth: server certificate: %w", err)
		}
		inter := x509.NewCertPool()
		for _, r := range rawCerts[1:] {
			if ic, err := x509.ParseCertificate(r); err == nil {
				inter.AddCert(ic)
			}
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: time.Now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return fmt.Errorf("auth: server certificate not from this cluster's CA: %w", err)
		}
		return nil
	}
	return &transport.Security{
		ServerTLS: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    roots,
			MinVersion:   tls.VersionTLS13,
		},
		ClientTLS: &tls.Config{
			Certificates: []tls.Certificate{cert},
			// The chain is verified by VerifyPeerCertificate, without a
			// host name; the transport then checks the server's role.
			InsecureSkipVerify:    true,
			VerifyPeerCertificate: verifyServer,
			MinVersion:            tls.VersionTLS13,
		},
		Identify: func(c *x509.Certificate) (transport.Role, string, error) { return identity(c) },
		Encrypt:  encrypt,
	}
}
