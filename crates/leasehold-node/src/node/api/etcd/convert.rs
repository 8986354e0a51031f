//! etcd's messages as the core's requests, and the core's answers as etcd's messages. Enum
//! fields a client sends out of range are refused by name, never read as another value.

use crate::proto::etcd::etcdserverpb as pb;
use crate::proto::etcd::mvccpb;
use leasehold_core::etcd::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, EtcdEvent, EtcdEventKind, KeyValue,
    OpAnswer, PutRequest, RangeAnswer, RangeRequest, RequestOp, SortOrder, SortTarget, Txn,
    TxnAnswer,
};
use leasehold_core::InvalidInput;

fn out_of_range(field: &'static str, value: i32) -> InvalidInput {
    InvalidInput::new(field, format!("{value} is not one of etcd's values for it"))
}

pub fn range(r: pb::RangeRequest) -> Result<RangeRequest, InvalidInput> {
    use pb::range_request::{SortOrder as Order, SortTarget as Target};
    let sort_order = match Order::try_from(r.sort_order) {
        Ok(Order::None) => SortOrder::None,
        Ok(Order::Ascend) => SortOrder::Ascend,
        Ok(Order::Descend) => SortOrder::Descend,
        Err(_) => return Err(out_of_range("sort_order", r.sort_order)),
    };
    let sort_target = match Target::try_from(r.sort_target) {
        Ok(Target::Key) => SortTarget::Key,
        Ok(Target::Version) => SortTarget::Version,
        Ok(Target::Create) => SortTarget::Create,
        Ok(Target::Mod) => SortTarget::Mod,
        Ok(Target::Value) => SortTarget::Value,
        Err(_) => return Err(out_of_range("sort_target", r.sort_target)),
    };
    Ok(RangeRequest {
        key: r.key,
        range_end: r.range_end,
        limit: r.limit,
        sort_order,
        sort_target,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: r.min_mod_revision,
        max_mod_revision: r.max_mod_revision,
        min_create_revision: r.min_create_revision,
        max_create_revision: r.max_create_revision,
    })
}

pub fn put(p: pb::PutRequest) -> PutRequest {
    PutRequest {
        key: p.key,
        value: p.value,
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

pub fn delete_range(d: pb::DeleteRangeRequest) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key: d.key,
        range_end: d.range_end,
        prev_kv: d.prev_kv,
    }
}

pub fn txn(t: pb::TxnRequest) -> Result<Txn, InvalidInput> {
    let ops = |ops: Vec<pb::RequestOp>| -> Result<Vec<RequestOp>, InvalidInput> {
        ops.into_iter().map(request_op).collect()
    };
    Ok(Txn {
        compare: t
            .compare
            .into_iter()
            .map(compare)
            .collect::<Result<_, _>>()?,
        success: ops(t.success)?,
        failure: ops(t.failure)?,
    })
}

fn request_op(op: pb::RequestOp) -> Result<RequestOp, InvalidInput> {
    use pb::request_op::Request;
    Ok(match op.request {
        Some(Request::RequestRange(r)) => {
            if r.revision != 0 {
                return Err(InvalidInput::new(
                    "revision",
                    "a range inside a transaction reads at the transaction's revision: leave \
                     its revision 0",
                ));
            }
            RequestOp::Range(range(r)?)
        }
        Some(Request::RequestPut(p)) => RequestOp::Put(put(p)),
        Some(Request::RequestDeleteRange(d)) => RequestOp::DeleteRange(delete_range(d)),
        Some(Request::RequestTxn(t)) => RequestOp::Txn(txn(t)?),
        None => {
            return Err(InvalidInput::new(
                "request",
                "a RequestOp names a range, put, delete_range or txn: this one names none",
            ))
        }
    })
}

fn compare(c: pb::Compare) -> Result<Compare, InvalidInput> {
    use pb::compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    let result = match R::try_from(c.result) {
        Ok(R::Equal) => CompareResult::Equal,
        Ok(R::Greater) => CompareResult::Greater,
        Ok(R::Less) => CompareResult::Less,
        Ok(R::NotEqual) => CompareResult::NotEqual,
        Err(_) => return Err(out_of_range("result", c.result)),
    };
    // The target names the field; the union carries its value, read only when it is that
    // field's (proto3 reads a missing one as zero, and etcd a mismatched one too).
    let target = match (T::try_from(c.target), c.target_union) {
        (Ok(T::Version), Some(U::Version(v))) => CompareTarget::Version(v),
        (Ok(T::Version), _) => CompareTarget::Version(0),
        (Ok(T::Create), Some(U::CreateRevision(v))) => CompareTarget::Create(v),
        (Ok(T::Create), _) => CompareTarget::Create(0),
        (Ok(T::Mod), Some(U::ModRevision(v))) => CompareTarget::Mod(v),
        (Ok(T::Mod), _) => CompareTarget::Mod(0),
        (Ok(T::Lease), Some(U::Lease(v))) => CompareTarget::Lease(v),
        (Ok(T::Lease), _) => CompareTarget::Lease(0),
        (Ok(T::Value), Some(U::Value(v))) => CompareTarget::Value(v),
        (Ok(T::Value), _) => CompareTarget::Value(Vec::new()),
        (Err(_), _) => return Err(out_of_range("target", c.target)),
    };
    Ok(Compare {
        result,
        target,
        key: c.key,
        range_end: c.range_end,
    })
}

pub fn key_value(kv: &KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key.to_vec(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value.to_vec(),
        lease: kv.lease,
    }
}

pub fn event(e: &EtcdEvent, prev_kv: bool) -> mvccpb::Event {
    let kind = match e.kind {
        EtcdEventKind::Put => mvccpb::event::EventType::Put,
        EtcdEventKind::Delete => mvccpb::event::EventType::Delete,
    };
    mvccpb::Event {
        r#type: kind as i32,
        kv: Some(key_value(&e.kv)),
        prev_kv: e.prev_kv.as_ref().filter(|_| prev_kv).map(key_value),
    }
}

pub fn range_response(answer: RangeAnswer, header: pb::ResponseHeader) -> pb::RangeResponse {
    pb::RangeResponse {
        header: Some(header),
        kvs: answer.kvs.iter().map(key_value).collect(),
        more: answer.more,
        count: answer.count,
    }
}

pub fn txn_response(answer: TxnAnswer, header: pb::ResponseHeader) -> pb::TxnResponse {
    use pb::response_op::Response;
    let responses = answer.responses.into_iter().map(|op| {
        let response = match op {
            OpAnswer::Range(r) => Response::ResponseRange(range_response(r, header)),
            OpAnswer::Put { prev_kv } => Response::ResponsePut(pb::PutResponse {
                header: Some(header),
                prev_kv: prev_kv.as_ref().map(key_value),
            }),
            OpAnswer::DeleteRange { deleted, prev_kvs } => {
                Response::ResponseDeleteRange(pb::DeleteRangeResponse {
                    header: Some(header),
                    deleted,
                    prev_kvs: prev_kvs.iter().map(key_value).collect(),
                })
            }
            OpAnswer::Txn(nested) => Response::ResponseTxn(txn_response(nested, header)),
        };
        pb::ResponseOp {
            response: Some(response),
        }
    });
    pb::TxnResponse {
        header: Some(header),
        succeeded: answer.succeeded,
        responses: responses.collect(),
    }
}
