package apiclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
)

// reachError says why the controller at host could not be reached, once, with what to check:
// the transport's own error repeats the address in each layer (the URL, then the dial).
func reachError(host string, err error) error {
	if hint := reachHint(err); hint != "" {
		return fmt.Errorf("cannot reach the controller at %s: %s (%w)", host, hint, innermost(err))
	}
	return fmt.Errorf("cannot reach the controller at %s: %w", host, innermost(err))
}

// reachHint says what to check when a controller could not be reached, or "".
func reachHint(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: is the controller running, and is that its API address?"
	case errors.As(err, &dnsErr):
		return "the name does not resolve: check the controller's address"
	case errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err):
		return "no answer in time: check the address, the network and any firewall between"
	case certRefused(err):
		return "its certificate is not one this client accepts for that address (expired, or of another CA: if the controller's CA changed, log in again with zmesh edge login)"
	}
	return ""
}

// unreached reports whether err came before a request could reach the controller: the
// connection or its TLS handshake failed. Other errors (a reset, EOF or timeout once the
// request was sent) may come after the controller acted on it.
func unreached(err error) bool {
	var (
		oe     *net.OpError
		dnsErr *net.DNSError
		record tls.RecordHeaderError
	)
	return errors.As(err, &oe) && oe.Op == "dial" || errors.As(err, &dnsErr) ||
		certRefused(err) || errors.As(err, &record)
}

// certRefused reports whether err is this client refusing the controller's certificate.
func certRefused(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalid) ||
		errors.As(err, &verify)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// innermost drops the layers that repeat the address: the URL's and the dial's.
func innermost(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	return err
}
