package cluster

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
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the cluster's certificate authority and the files it issued, all
// under dir. Keys are ECDSA P-256 (fast to make, accepted everywhere).
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	CA     string // ca.crt
	CAKey  string // ca.key (the controller-manager signs CSRs with it)
}

// pair is a certificate and its key on disk.
type pair struct{ Cert, Key string }

// certSpec describes a certificate to issue.
type certSpec struct {
	name   string // file name stem
	cn     string
	orgs   []string
	server bool // serving (ExtKeyUsageServerAuth) as well as client
	ips    []net.IP
	dns    []string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "nri-cni-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, CA: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key")}
	if err := writePEM(p.CA, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := writeKey(p.CAKey, key); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs a certificate for s and writes <name>.crt and <name>.key.
func (p *pki) issue(s certSpec) (pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pair{}, fmt.Errorf("%s key: %w", s.name, err)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if s.server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		IPAddresses:  s.ips,
		DNSNames:     s.dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return pair{}, fmt.Errorf("%s cert: %w", s.name, err)
	}
	out := pair{Cert: filepath.Join(p.dir, s.name+".crt"), Key: filepath.Join(p.dir, s.name+".key")}
	if err := writePEM(out.Cert, "CERTIFICATE", der); err != nil {
		return pair{}, err
	}
	if err := writeKey(out.Key, key); err != nil {
		return pair{}, err
	}
	return out, nil
}

// serviceAccountKeys writes the service-account signing key pair
// (sa.key, sa.pub) and returns their paths.
func (p *pki) serviceAccountKeys() (priv, pub string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("service-account key: %w", err)
	}
	priv, pub = filepath.Join(p.dir, "sa.key"), filepath.Join(p.dir, "sa.pub")
	if err := writeKey(priv, key); err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", fmt.Errorf("service-account public key: %w", err)
	}
	return priv, pub, writePEM(pub, "PUBLIC KEY", der)
}

// kubeconfig writes a kubeconfig for server authenticating with the client
// certificate c.
func (p *pki) kubeconfig(path, server, user string, c pair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.CA}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: c.Cert, ClientKey: c.Key}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
