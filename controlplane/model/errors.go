package model

import (
	"errors"
	"fmt"
)

// Error codes. They are the API's codes, so that a failure keeps its meaning from the rule
// that found it to the client.
const (
	CodeNotFound                 = "NOT_FOUND"
	CodeCouldNotValidate         = "COULD_NOT_VALIDATE"
	CodeInvalidAuth              = "INVALID_AUTH"
	CodeUnauthorized             = "UNAUTHORIZED"
	CodeRateLimited              = "RATE_LIMITED"
	CodeEnrollmentExpired        = "ENROLLMENT_EXPIRED"
	CodeInvalidEnrollmentToken   = "INVALID_ENROLLMENT_TOKEN"
	CodeInvalidEnrollMethod      = "INVALID_ENROLL_METHOD"
	CodeCouldNotProcessCSR       = "COULD_NOT_PROCESS_CSR"
	CodeCertInUse                = "CERT_IN_USE"
	CodeCertFailedValidation     = "CERT_FAILED_VALIDATION"
	CodeCAIdentityMismatch       = "ENROLLMENT_CA_NO_VALID_CERT"
	CodeInvalidCertificate       = "INVALID_CERTIFICATE"
	CodeCanNotDeleteReferenced   = "CAN_NOT_DELETE_REFERENCED_ENTITY"
	CodeCAAlreadyVerified        = "CA_ALREADY_VERIFIED"
	CodeCannotUpdateDefaultAdmin = "CAN_NOT_UPDATE_DEFAULT_ADMIN"
	CodeCannotDeleteDefaultAdmin = "CAN_NOT_DELETE_DEFAULT_ADMIN"
	CodeCertExtendNotSupported   = "CERT_NOT_ISSUED_BY_NETWORK"
	CodeCertExtendMismatch       = "INVALID_CLIENT_CERT"
	CodeNoAuthenticatorToVerify  = "NO_CERT_EXTENSION_IN_PROGRESS"
)

// Error is a failure of a rule of the model, with the API code that names it. Field, when
// set, names the request field at fault.
type Error struct {
	Code    string
	Message string
	Field   string
	Value   any
	Cause   error
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// invalid is a COULD_NOT_VALIDATE error naming the field and the rule it breaks.
func invalid(field string, value any, format string, args ...any) *Error {
	return &Error{Code: CodeCouldNotValidate, Field: field, Value: value, Message: fmt.Sprintf(format, args...)}
}

func notFound(kind, id string) *Error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("%s %q not found", kind, id)}
}

// CodeOf returns the code of err, or "" when err is not a model error.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
