package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// certificateAuthority signs the throwaway certificates of one control plane. Its key
// never leaves memory: only the certificate is written for kube-apiserver to trust.
type certificateAuthority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// keyPair is a PEM-encoded certificate and its private key, as rest.Config and
// kube-apiserver's flags want them.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

func newCertificateAuthority(commonName string) (*certificateAuthority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	template, err := certificateTemplate(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	template.IsCA = true
	template.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate %q: %w", commonName, err)
	}
	return &certificateAuthority{cert: cert, certPEM: encodeCertificate(der), key: key}, nil
}

// issueServing issues a certificate that a TLS server presents for the given addresses.
func (ca *certificateAuthority) issueServing(commonName string, ips []net.IP, dnsNames []string) (*keyPair, error) {
	template, err := certificateTemplate(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	template.IPAddresses = ips
	template.DNSNames = dnsNames
	return ca.issue(template)
}

// issueClient issues a client certificate that kube-apiserver maps to the user named by
// the common name, in the groups named by the organizations.
func (ca *certificateAuthority) issueClient(user string, groups []string) (*keyPair, error) {
	template, err := certificateTemplate(pkix.Name{CommonName: user, Organization: groups})
	if err != nil {
		return nil, err
	}
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(template)
}

func (ca *certificateAuthority) issue(template *x509.Certificate) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", template.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{certPEM: encodeCertificate(der), keyPEM: keyPEM}, nil
}

// newKey makes an ECDSA P-256 key: generating one takes microseconds where RSA takes
// tens of milliseconds, which adds up when every test asks for its own user.
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return key, nil
}

func certificateTemplate(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		// Backdated so that a clock a little behind the signer's still accepts it.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		BasicConstraintsValid: true,
	}, nil
}

func encodeCertificate(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func encodePublicKey(key crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
