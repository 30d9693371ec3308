package model

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// Where an external id claim is read from a client certificate.
const (
	ClaimLocCommonName = "COMMON_NAME"
	ClaimLocSanURI     = "SAN_URI"
	ClaimLocSanEmail   = "SAN_EMAIL"
)

// How the values of the location are selected.
const (
	ClaimMatchAll    = "ALL"
	ClaimMatchPrefix = "PREFIX" // values that start with the criteria, without it
	ClaimMatchSuffix = "SUFFIX" // values that end with the criteria, without it
	ClaimMatchScheme = "SCHEME" // URIs of the scheme named by the criteria
)

// How a selected value becomes claims.
const (
	ClaimParseNone  = "NONE"
	ClaimParseSplit = "SPLIT" // split at the criteria
)

// CodeMissingCertClaim answers a CA enrollment whose certificate lacks the CA's external id
// claim.
const CodeMissingCertClaim = "MISSING_CERT_CLAIM"

// ExternalIDClaim tells how a third-party CA's client certificates name their identity: the
// claims found at Location, selected by Matcher and split by Parser, in certificate order;
// the one at Index is the external id of the identity the certificate stands for. A CA with
// a claim enrolls identities by external id and authenticates a certificate as the identity
// with that external id, whatever certificate it enrolled with.
type ExternalIDClaim struct {
	Location        string `json:"location"`
	Matcher         string `json:"matcher"`
	MatcherCriteria string `json:"matcherCriteria"`
	Parser          string `json:"parser"`
	ParserCriteria  string `json:"parserCriteria"`
	Index           int64  `json:"index"`
}

// check refuses a claim that cannot find anything.
func (c *ExternalIDClaim) check() error {
	const f = "externalIdClaim."
	switch c.Location {
	case ClaimLocCommonName, ClaimLocSanEmail:
		if c.Matcher == ClaimMatchScheme {
			return invalid(f+"matcher", c.Matcher, "%s applies to location %s only", ClaimMatchScheme, ClaimLocSanURI)
		}
	case ClaimLocSanURI:
		if c.Matcher == ClaimMatchPrefix || c.Matcher == ClaimMatchSuffix {
			return invalid(f+"matcher", c.Matcher, "location %s allows %s or %s", ClaimLocSanURI, ClaimMatchAll, ClaimMatchScheme)
		}
	default:
		return invalid(f+"location", c.Location, "allowed: %s, %s, %s", ClaimLocCommonName, ClaimLocSanURI, ClaimLocSanEmail)
	}
	switch c.Matcher {
	case ClaimMatchAll:
	case ClaimMatchPrefix, ClaimMatchSuffix, ClaimMatchScheme:
		if c.MatcherCriteria == "" {
			return invalid(f+"matcherCriteria", c.MatcherCriteria, "must not be empty with matcher %s", c.Matcher)
		}
	default:
		return invalid(f+"matcher", c.Matcher, "allowed: %s, %s, %s, %s", ClaimMatchAll, ClaimMatchPrefix, ClaimMatchSuffix, ClaimMatchScheme)
	}
	switch c.Parser {
	case ClaimParseNone:
	case ClaimParseSplit:
		if c.ParserCriteria == "" {
			return invalid(f+"parserCriteria", c.ParserCriteria, "must not be empty with parser %s", ClaimParseSplit)
		}
	default:
		return invalid(f+"parser", c.Parser, "allowed: %s, %s", ClaimParseNone, ClaimParseSplit)
	}
	if c.Index < 0 {
		return invalid(f+"index", c.Index, "must be 0 or more")
	}
	return nil
}

// Claims returns every claim the certificate carries for the definition, in order.
func (c *ExternalIDClaim) Claims(cert *x509.Certificate) []string {
	var values []string
	switch c.Location {
	case ClaimLocCommonName:
		values = []string{cert.Subject.CommonName}
	case ClaimLocSanEmail:
		values = cert.EmailAddresses
	case ClaimLocSanURI:
		for _, u := range cert.URIs {
			if c.Matcher != ClaimMatchScheme || u.Scheme == c.MatcherCriteria {
				values = append(values, u.String())
			}
		}
	}
	var out []string
	for _, v := range values {
		switch c.Matcher {
		case ClaimMatchPrefix:
			rest, ok := strings.CutPrefix(v, c.MatcherCriteria)
			if !ok {
				continue
			}
			v = rest
		case ClaimMatchSuffix:
			rest, ok := strings.CutSuffix(v, c.MatcherCriteria)
			if !ok {
				continue
			}
			v = rest
		}
		if c.Parser == ClaimParseSplit {
			out = append(out, strings.Split(v, c.ParserCriteria)...)
		} else {
			out = append(out, v)
		}
	}
	return out
}

// ExternalID returns the certificate's external id under the claim.
func (c *ExternalIDClaim) ExternalID(cert *x509.Certificate) (string, error) {
	claims := c.Claims(cert)
	if c.Index >= int64(len(claims)) {
		return "", fmt.Errorf("the certificate has %d claims at %s, none at index %d", len(claims), c.Location, c.Index)
	}
	return claims[c.Index], nil
}
