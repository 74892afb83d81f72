// Package security proves tidal's authentication and authorization the way
// users run it: the collector, decider and actuator as processes
// (test/system), each with its own certificate and SPIFFE ID made by
// identity/pki, called by clients holding each kind of caller's
// certificate, and by grpcurl.
package security
