//! What a failed attempt's status says, read from it: a node's own refusal and its reason, a
//! connection never made or refused, a TLS handshake refused over a certificate. Both the
//! call's attempts (`attempts`) and a quick give-up (`dead_end`) ask.

use std::error::Error;

use leasehold_proto::wire::REMOVED_REASON;
use leasehold_proto::ORIGIN_KEY;
use tonic::Status;
use tonic_types::StatusExt;

/// Whether `status` is a node's refusal for `reason`.
pub(crate) fn refused_for(status: &Status, reason: &str) -> bool {
    status.metadata().get(ORIGIN_KEY).is_some()
        && status
            .get_details_error_info()
            .is_some_and(|info| info.reason == reason)
}

/// Whether `status` is a node's word that the cluster removed it: it never serves again, so
/// the call asks it no more.
pub(crate) fn removed(status: &Status) -> bool {
    refused_for(status, REMOVED_REASON)
}

/// What failed under `status`, from the transport's error down to the deepest cause.
pub(crate) fn causes(status: &Status) -> impl Iterator<Item = &(dyn Error + 'static)> {
    std::iter::successors(Error::source(status), |error: &&(dyn Error + 'static)| {
        (*error).source()
    })
}

/// Only a connection that was never made proves the request was not sent: tonic reports a
/// failed connect (refused, timed out) as a `ConnectError` in the status's source chain.
pub(crate) fn never_sent(status: &Status) -> bool {
    causes(status).any(|error| error.is::<tonic::ConnectError>())
}

/// Whether the attempt's connection was refused: nothing listens at the node's address.
pub(crate) fn nothing_listens(status: &Status) -> bool {
    causes(status).any(|error| {
        let refused = error.downcast_ref::<std::io::Error>();
        refused.is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// A TLS handshake that failed over a certificate, as it will however often it is tried: what
/// to mend, if `status` is one. rustls's error comes inside an `io::Error`, whose own `source`
/// skips it; once the connection serves, an alert the node sent comes as its text alone.
pub(crate) fn certificate_refused(status: &Status) -> Option<String> {
    use rustls::AlertDescription as Alert;
    // What the node says when it refuses this client's certificate.
    const REFUSALS: [Alert; 8] = [
        Alert::BadCertificate,
        Alert::UnsupportedCertificate,
        Alert::CertificateRevoked,
        Alert::CertificateExpired,
        Alert::CertificateUnknown,
        Alert::UnknownCA,
        Alert::CertificateRequired,
        // A signature that did not verify: the certificate's (another CA under the same name)
        // or the handshake's (a key that is not the certificate's).
        Alert::DecryptError,
    ];
    for error in causes(status) {
        let Some(inner) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        else {
            continue;
        };
        if let Some(rustls::Error::InvalidCertificate(e)) = inner.downcast_ref() {
            return Some(untrusted(e));
        }
        let text = inner.to_string();
        if REFUSALS
            .iter()
            .any(|alert| rustls::Error::AlertReceived(*alert).to_string() == text)
        {
            return Some(format!(
                "the node refused this client's certificate ({text}): show one that the \
                 cluster's CA signed (--tls-cert and --tls-key)"
            ));
        }
    }
    None
}

/// What to mend when this client does not accept the node's certificate, by why.
fn untrusted(e: &rustls::CertificateError) -> String {
    use rustls::CertificateError as Why;
    let mend = match e {
        Why::UnknownIssuer | Why::BadSignature => {
            "is --tls-ca the CA that signed the nodes' certificates?"
        }
        Why::NotValidForName | Why::NotValidForNameContext { .. } => {
            "dial the node by a name or address its certificate holds (`leasehold certs \
             --hosts` names them)"
        }
        Why::Expired
        | Why::ExpiredContext { .. }
        | Why::NotValidYet
        | Why::NotValidYetContext { .. } => {
            "renew the nodes' certificates, or check this machine's clock"
        }
        _ => "check the nodes' certificates against --tls-ca",
    };
    format!("this client does not accept the node's certificate ({e}): {mend}")
}
