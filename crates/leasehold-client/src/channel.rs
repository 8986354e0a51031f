//! A channel to one node: lazy, and carrying the client's bearer token, if it has one, on every
//! request, so that every call site builds its request as before.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// A channel to one node that adds the client's bearer token, if it has one, to every request.
pub(crate) type NodeChannel = InterceptedService<Channel, Bearer>;

/// The `authorization` value a client sends with every request, if any, and whether the
/// channel it rides is plain (then it is never sent: the call is refused instead).
#[derive(Clone, Default)]
pub(crate) struct Bearer {
    pub(crate) token: Option<MetadataValue<Ascii>>,
    plain: bool,
}

/// Why a client with a bearer token refuses to call a node without TLS.
pub(crate) const TOKEN_WITHOUT_TLS: &str = "a bearer token is sent over TLS only, and this \
    endpoint is plain: call with_tls too (before or after with_bearer_token), or drop the token";

impl Bearer {
    /// Sends `token` (an `authorization` value) on channels with TLS.
    pub(crate) fn new(token: MetadataValue<Ascii>) -> Self {
        Bearer {
            token: Some(token),
            plain: false,
        }
    }

    /// Lazy channels to `targets` (from `ip`, when given) that send this token.
    pub(crate) fn channels(
        &self,
        targets: &[Endpoint],
        ip: Option<std::net::IpAddr>,
    ) -> Vec<NodeChannel> {
        let channel = |target: &Endpoint| match ip {
            Some(ip) => target.clone().local_address(Some(ip)).connect_lazy(),
            None => target.connect_lazy(),
        };
        let with = |target: &Endpoint| {
            let plain = target.uri().scheme_str() != Some("https");
            let token = self.token.clone();
            InterceptedService::new(channel(target), Bearer { token, plain })
        };
        targets.iter().map(with).collect()
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.token {
            if self.plain {
                // The client refuses such calls before making them; this is the last guard.
                return Err(Status::failed_precondition(TOKEN_WITHOUT_TLS));
            }
            request
                .metadata_mut()
                .insert(leasehold_proto::wire::AUTHORIZATION_KEY, value.clone());
        }
        Ok(request)
    }
}
