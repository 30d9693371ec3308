package model

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"slices"
	"testing"
)

func TestExternalIDClaims(t *testing.T) {
	t.Parallel()
	spiffe, _ := url.Parse("spiffe://corp/dev/1")
	web, _ := url.Parse("https://corp/x")
	cert := &x509.Certificate{
		Subject:        pkix.Name{CommonName: "id:a.b.c"},
		EmailAddresses: []string{"joe@other.org", "ann.lee@corp.org"},
		URIs:           []*url.URL{web, spiffe},
	}
	for _, c := range []struct {
		claim ExternalIDClaim
		want  []string
	}{
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchAll, Parser: ClaimParseNone}, []string{"id:a.b.c"}},
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "id:", Parser: ClaimParseSplit, ParserCriteria: "."}, []string{"a", "b", "c"}},
		{ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "cn:", Parser: ClaimParseNone}, nil},
		{ExternalIDClaim{Location: ClaimLocSanEmail, Matcher: ClaimMatchSuffix, MatcherCriteria: "@corp.org", Parser: ClaimParseNone}, []string{"ann.lee"}},
		{ExternalIDClaim{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseSplit, ParserCriteria: "@"}, []string{"joe", "other.org", "ann.lee", "corp.org"}},
		{ExternalIDClaim{Location: ClaimLocSanURI, Matcher: ClaimMatchScheme, MatcherCriteria: "spiffe", Parser: ClaimParseNone}, []string{"spiffe://corp/dev/1"}},
		{ExternalIDClaim{Location: ClaimLocSanURI, Matcher: ClaimMatchAll, Parser: ClaimParseNone}, []string{"https://corp/x", "spiffe://corp/dev/1"}},
	} {
		if err := c.claim.check(); err != nil {
			t.Errorf("%+v: %v", c.claim, err)
		}
		if got := c.claim.Claims(cert); !slices.Equal(got, c.want) {
			t.Errorf("%+v: claims %q, want %q", c.claim, got, c.want)
		}
	}
	claim := ExternalIDClaim{Location: ClaimLocCommonName, Matcher: ClaimMatchPrefix, MatcherCriteria: "id:", Parser: ClaimParseSplit, ParserCriteria: ".", Index: 2}
	if id, err := claim.ExternalID(cert); err != nil || id != "c" {
		t.Errorf("index 2: %q, %v", id, err)
	}
	claim.Index = 3
	if id, err := claim.ExternalID(cert); err == nil {
		t.Errorf("index 3 of 3 claims: %q", id)
	}
	for _, bad := range []ExternalIDClaim{
		{Location: "SAN_DNS", Matcher: ClaimMatchAll, Parser: ClaimParseNone},
		{Location: ClaimLocCommonName, Matcher: ClaimMatchScheme, MatcherCriteria: "x", Parser: ClaimParseNone},
		{Location: ClaimLocSanURI, Matcher: ClaimMatchSuffix, MatcherCriteria: "x", Parser: ClaimParseNone},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchPrefix, Parser: ClaimParseNone},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: "REGEX"},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseSplit},
		{Location: ClaimLocSanEmail, Matcher: ClaimMatchAll, Parser: ClaimParseNone, Index: -1},
	} {
		if err := bad.check(); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
