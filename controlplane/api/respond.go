// Package api serves the controller's HTTPS APIs: the client API under /edge/client/v1 and
// the management API under /edge/management/v1, with the request and response shapes,
// envelopes, error codes and session header that clients of this API family expect. Handlers
// decode and check requests, call the model, and render its entities.
package api

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/cluster"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/controlplane/store"
)

// API versions reported in every response's meta.
const (
	apiVersion           = "0.0.1"
	apiEnrollmentVersion = "0.0.1"
)

// Meta is the meta object of every enveloped response.
type Meta struct {
	APIVersion           string      `json:"apiVersion,omitempty"`
	APIEnrollmentVersion string      `json:"apiEnrollmentVersion,omitempty"`
	Pagination           *Pagination `json:"pagination,omitempty"`
	FilterableFields     []string    `json:"filterableFields,omitempty"`
}

// Pagination describes one page of a list.
type Pagination struct {
	Limit      int `json:"limit"`
	Offset     int `json:"offset"`
	TotalCount int `json:"totalCount"`
}

type envelope struct {
	Data any  `json:"data"`
	Meta Meta `json:"meta"`
}

type errorEnvelope struct {
	Error apiError `json:"error"`
	Meta  Meta     `json:"meta"`
}

type apiError struct {
	Code         string      `json:"code"`
	Message      string      `json:"message"`
	Cause        *fieldError `json:"cause,omitempty"`
	CauseMessage string      `json:"causeMessage,omitempty"`
	RequestID    string      `json:"requestId"`
}

type fieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
	Value  any    `json:"value,omitempty"`
}

// Error codes of the API layer itself (the model's are in package model).
const (
	codeInvalidFilter       = "INVALID_FILTER"
	codeUnhandled           = "UNHANDLED"
	codeNotFound            = model.CodeNotFound
	codeUnauthorized        = model.CodeUnauthorized
	codeCouldNotValidate    = model.CodeCouldNotValidate
	codeMethodNotAllowed    = "METHOD_NOT_ALLOWED"
	codeUnsupportedMedia    = "UNSUPPORTED_MEDIA_TYPE"
	codeInvalidAuthMethod   = "INVALID_AUTH_METHOD"
	codeRequestBodyTooLarge = "REQUEST_TOO_LARGE"
	// Writes a member of a cluster could not carry out, all 503 with Retry-After: no leader
	// is known or it cannot be reached (no quorum, an election); an operation only the
	// leader does, on a follower (the message names the leader); the write may or may not
	// have been committed (the leadership was lost, or no quorum answered in time); the write
	// is committed but this member has not applied it yet; the member's raft node cannot
	// take writes (stopping, restarting).
	codeClusterHasNoLeader     = "CLUSTER_HAS_NO_LEADER"
	codeClusterNotLeader       = "CLUSTER_NOT_LEADER"
	codeClusterOutcomeUnknown  = "CLUSTER_OUTCOME_UNKNOWN"
	codeClusterWriteNotApplied = "CLUSTER_WRITE_NOT_APPLIED_HERE"
	codeClusterUnavailable     = "CLUSTER_UNAVAILABLE"
)

// statusOf maps an error code to its HTTP status.
func statusOf(code string) int {
	switch code {
	case model.CodeNotFound:
		return http.StatusNotFound
	case model.CodeInvalidAuth, model.CodeUnauthorized, model.CodeMFAInvalidToken:
		return http.StatusUnauthorized
	case model.CodeRateLimited:
		return http.StatusTooManyRequests
	case model.CodeEnrollmentExpired:
		return http.StatusGone
	case model.CodeCertInUse, model.CodeCAAlreadyVerified, model.CodeCannotDeleteDefaultAdmin,
		model.CodeCannotUpdateDefaultAdmin, model.CodeCanNotDeleteReferenced, model.CodeNoAuthenticatorToVerify,
		model.CodeInvalidPosture, model.CodeMFAExists, model.CodeEnrollmentIdentityExists:
		return http.StatusConflict
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case codeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case codeRequestBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeUnhandled:
		return http.StatusInternalServerError
	case codeNotImplemented:
		return http.StatusNotImplemented
	}
	return http.StatusBadRequest
}

// apiErr is an error the API layer raises, with its code and optional field.
type apiErr struct {
	code, message string
	field         string
	value         any
	status        int // overrides statusOf(code) when not zero
}

func (e *apiErr) Error() string { return e.code + ": " + e.message }

func newErr(code, format string, args ...any) *apiErr {
	return &apiErr{code: code, message: fmt.Sprintf(format, args...)}
}

func fieldErr(field string, value any, format string, args ...any) *apiErr {
	return &apiErr{code: codeCouldNotValidate, field: field, value: value, message: fmt.Sprintf(format, args...)}
}

// errForbidden is what a non-administrator gets from an administrators' operation.
var errForbidden = &apiErr{code: codeUnauthorized, message: "the operation needs an administrator", status: http.StatusForbidden}

func newRequestID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func baseMeta() Meta { return Meta{APIVersion: apiVersion, APIEnrollmentVersion: apiEnrollmentVersion} }

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

func writeData(w http.ResponseWriter, status int, data any) {
	writeJSON(w, status, envelope{Data: data, Meta: Meta{}})
}

// writeError renders err in the error envelope. Errors that are neither the model's nor the
// API's are logged and reported as UNHANDLED without detail.
func writeError(w http.ResponseWriter, log *slog.Logger, requestID string, err error) {
	ae := apiError{RequestID: requestID}
	status := 0
	var me *model.Error
	var ae2 *apiErr
	switch {
	case errors.Is(err, cluster.ErrNotCaughtUp), errors.Is(err, cluster.ErrOutcomeUnknown),
		errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrLeaderUnreachable), errors.Is(err, cluster.ErrNotLeader),
		errors.Is(err, store.ErrUnavailable), errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrLeadershipLost):
		// The cluster cannot take the write now: the client may retry in a second.
		var nl *cluster.NotLeaderError
		switch {
		case errors.Is(err, cluster.ErrNotCaughtUp):
			ae.Code = codeClusterWriteNotApplied
		case errors.Is(err, cluster.ErrOutcomeUnknown):
			ae.Code = codeClusterOutcomeUnknown
		case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrLeaderUnreachable):
			ae.Code = codeClusterHasNoLeader
		case errors.As(err, &nl) && nl.LeaderID != "":
			ae.Code = codeClusterNotLeader
		case errors.Is(err, cluster.ErrNotLeader):
			ae.Code = codeClusterHasNoLeader
		default:
			ae.Code = codeClusterUnavailable
		}
		ae.Message, status = err.Error(), http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case errors.As(err, &ae2):
		ae.Code, ae.Message, status = ae2.code, ae2.message, ae2.status
		if ae2.field != "" {
			ae.Cause = &fieldError{Field: ae2.field, Reason: ae2.message, Value: ae2.value}
			ae.Message = "the value of " + ae2.field + " is invalid: " + ae2.message
		}
	case errors.As(err, &me):
		ae.Code, ae.Message = me.Code, me.Message
		if me.Field != "" {
			ae.Cause = &fieldError{Field: me.Field, Reason: me.Message, Value: me.Value}
			ae.Message = "the value of " + me.Field + " is invalid: " + me.Message
		}
		var rl *model.RateLimitedError
		if errors.As(err, &rl) {
			w.Header().Set("Retry-After", fmt.Sprint(int(rl.RetryAfter.Seconds())+1))
		}
	default:
		log.Error("request failed", "requestId", requestID, "err", err)
		ae.Code, ae.Message = codeUnhandled, "the controller could not complete the request; see its log for request "+requestID
	}
	if status == 0 {
		status = statusOf(ae.Code)
	}
	writeJSON(w, status, errorEnvelope{Error: ae, Meta: baseMeta()})
}
