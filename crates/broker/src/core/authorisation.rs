//! ACL (RocketMQ ACL 1.0, `aclEnable`): every request, of every kind, passes [`authorise`]
//! once before it is served. The adapter says what the request is ([`Request`]), what it
//! names and needs ([`Needs`]) and which credentials it carries ([`Presented`]); the
//! decision is `ferromq_acl`'s, against the accounts in force (reloaded when the file
//! changes, see `ferromq_acl::Acl`).
//!
//! A refusal is NO_PERMISSION (16) with a remark naming what is missing (the signature, the
//! account, admin, or the permission on the named topic or group), counted in
//! `ferromq_requests_refused_total{reason="acl_…",request}`. The broker's own work (the
//! scheduler, the transaction checker, replication) does not go through requests and is not
//! checked.
//!
//! Cost: a granted signed request costs one HMAC-SHA1 over its ext values and body; a
//! refused one costs at most the same, so a burst of bad signatures costs the broker what
//! the same burst of good ones would.

use ferromq_acl::{Denial, Needs, Presented};

use super::access::{refuse, Request};
use super::error::{Refusal, RefusalKind};
use crate::context::BrokerContext;

/// Who a request was granted to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Principal {
    /// The access key the request is attributed to; `None` with ACL off or from an
    /// allow-listed address without one.
    pub access_key: Option<String>,
}

/// Decides one request. With ACL off every request passes as nobody in particular.
pub fn authorise(
    ctx: &BrokerContext,
    request: Request,
    presented: Presented<'_>,
    content: impl FnOnce() -> Vec<u8>,
    needs: &Needs<'_>,
) -> Result<Principal, Refusal> {
    let Some(acl) = &ctx.acl else {
        return Ok(Principal::default());
    };
    match acl.current().authorise(presented, content, needs) {
        Ok(granted) => Ok(Principal {
            access_key: granted.access_key().map(str::to_owned),
        }),
        Err(denial) => Err(deny(ctx, request, &denial)),
    }
}

fn deny(ctx: &BrokerContext, request: Request, denial: &Denial) -> Refusal {
    refuse(
        ctx,
        denial.reason(),
        request,
        RefusalKind::Forbidden,
        denial.to_string(),
    )
}
