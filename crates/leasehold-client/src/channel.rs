//! A channel to one node: lazy, and carrying the client's bearer token, if it has one, on every
//! request, so that every call site builds its request as before.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// A channel to one node that adds the client's bearer token, if it has one, to every request.
pub(crate) type NodeChannel = InterceptedService<Channel, Bearer>;

/// The `authorization` value a client sends with every request, if any.
#[derive(Clone, Default)]
pub(crate) struct Bearer(pub(crate) Option<MetadataValue<Ascii>>);

impl Bearer {
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
        let with = |target| InterceptedService::new(channel(target), self.clone());
        targets.iter().map(with).collect()
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert(leasehold_proto::wire::AUTHORIZATION_KEY, value.clone());
        }
        Ok(request)
    }
}
