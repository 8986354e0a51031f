//! HTTP/1.1 on a bounded listener (the HTTP/JSON API and the metrics endpoint), with the one
//! setting `axum::serve` does not expose: a timer for the request head. A connection that sends
//! no complete head within [`HTTP_IDLE`] is closed, whether it is new (connected, then silent,
//! or sent one byte) or kept alive between requests, so that it gives back its place under the
//! listener's bound (safety review 161302a, finding 3).

use std::future::Future;

use axum::extract::ConnectInfo;
use axum::serve::Listener;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tower_service::Service;

use crate::limits::HTTP_IDLE;

/// Serves `router` on each connection `listener` accepts until `stop`, then lets the
/// connections finish what they serve. Each request carries its connection's address as
/// axum's `ConnectInfo`.
pub(crate) async fn serve<L>(
    mut listener: L,
    router: Router,
    stop: impl Future<Output = ()> + Send,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: Clone + Send + Sync + 'static,
{
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        while connections.try_join_next().is_some() {}
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(addr.clone()));
            router.clone().call(request)
        });
        let mut closed = closed.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HTTP_IDLE);
            let connection = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(connection);
            let closing = async move {
                // The guard `wait_for` returns is dropped here, before anything awaits.
                let _ = closed.wait_for(|closing| *closing).await.map(|_| ());
            };
            tokio::select! {
                _ = connection.as_mut() => {}
                () = closing => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    closing.send_replace(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}
