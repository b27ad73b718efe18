//! A cached Tenant in as few bytes as it can be told back from: what [`strip`] keeps of a Tenant,
//! and nothing of its struct's empty room.
//!
//! Rules enforced here:
//! - lossless: [`Compact::tenant`] gives back exactly the stripped Tenant [`Compact::of`] was
//!   made from (a property test checks it), whatever its fields hold; what the controller writes
//!   is only held in fewer bytes;
//! - names shared by many tenants (node names, namespaces) are interned, and so is a condition's
//!   type, status and reason as one triple: one allocation each for the whole cache;
//! - what the controller writes is kept as a mark, not text: a status message that is the one
//!   an Active tenant gets (`holds .. on <node>`), a condition whose message is empty and which
//!   has no observedGeneration (as the controller writes `Placed`), a condition message that
//!   repeats the status message, the reservation finalizer alone, a resourceVersion that is a
//!   decimal number (as the API server gives it);
//! - a tenant's one condition is held inline (no allocation of its own);
//! - optional numbers (resourceVersion, generation, creationTimestamp, the status's
//!   observedGeneration) are held bare with a bit each saying whether they are set, and an empty
//!   node selector takes a pointer's room, not a map's, and a status that reserves its spec's
//!   footprint (or nothing) holds no amounts, and times are whole seconds (a fraction, which
//!   neither the API server nor the controller writes, is held aside), and what few statuses
//!   carry (a move, other amounts, a message other than the mark) is boxed: a [`Compact`] fits
//!   168 bytes (the size test), 176 with its allocation's header where it took 288.
//!
//! [`strip`]: crate::controller::state::strip::strip

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::Claim;
use crate::api::{
    Condition, MigrationStatus, ResourceAmounts, SpreadPlacement, Tenant, TenantMode, TenantPhase,
    TenantSpec, TenantSpread, TenantStatus,
};
use crate::api::{
    DO_NOT_DISRUPT_ANNOTATION, PLACED_CONDITION, PlacedReason, Resting, TENANT_FINALIZER,
};

/// A condition's type, status and reason.
#[derive(Debug)]
struct Words {
    type_: Box<str>,
    status: Box<str>,
    reason: Box<str>,
}

/// The three words of a condition, as the interner's set looks them up (borrowed or held).
trait Triple {
    fn words(&self) -> (&str, &str, &str);
}

impl Triple for Words {
    fn words(&self) -> (&str, &str, &str) {
        (&self.type_, &self.status, &self.reason)
    }
}

impl Triple for (&str, &str, &str) {
    fn words(&self) -> (&str, &str, &str) {
        *self
    }
}

impl Hash for dyn Triple + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.words().hash(state);
    }
}

impl PartialEq for dyn Triple + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.words() == other.words()
    }
}

impl Eq for dyn Triple + '_ {}

/// The set's entries hash and compare as their words (so a lookup by borrowed words finds them).
#[derive(Debug)]
struct Held(Arc<Words>);

impl Hash for Held {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (&*self.0 as &dyn Triple).hash(state);
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.0.words() == other.0.words()
    }
}

impl Eq for Held {}

impl<'a> Borrow<dyn Triple + 'a> for Held {
    fn borrow(&self) -> &(dyn Triple + 'a) {
        &*self.0
    }
}

/// One allocation per distinct name (and per distinct condition triple), shared by every
/// tenant that uses it.
#[derive(Debug, Default)]
pub struct Interner {
    names: HashSet<Arc<str>>,
    words: HashSet<Held>,
}

impl Interner {
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        let name: Arc<str> = Arc::from(name);
        self.names.insert(name.clone());
        name
    }

    fn words(&mut self, type_: &str, status: &str, reason: &str) -> Arc<Words> {
        let key: &dyn Triple = &(type_, status, reason);
        if let Some(known) = self.words.get(key) {
            return known.0.clone();
        }
        let words = Arc::new(Words {
            type_: Box::from(type_),
            status: Box::from(status),
            reason: Box::from(reason),
        });
        self.words.insert(Held(words.clone()));
        words
    }

    /// Forgets the names no tenant uses any more.
    pub fn prune(&mut self) {
        self.names.retain(|name| Arc::strong_count(name) > 1);
        self.words.retain(|held| Arc::strong_count(&held.0) > 1);
    }
}

/// A UID: in the canonical form the API server gives (lowercase 8-4-4-4-12 hex), its 128 bits
/// (held inline, as bytes, so the tenant needs no 16-byte alignment); otherwise its text (held
/// in [`Rare`]).
#[derive(Clone, Debug, PartialEq)]
enum Uid<'a> {
    Uuid([u8; 16]),
    Text(&'a str),
}

impl<'a> Uid<'a> {
    fn of(text: &'a str) -> Uid<'a> {
        Self::canonical(text).map_or(Uid::Text(text), |bits| Uid::Uuid(bits.to_be_bytes()))
    }
    /// The bits of a canonical UUID; `None` for any other text (which is kept as text, so
    /// telling it back is exact either way).
    fn canonical(text: &str) -> Option<u128> {
        if text.len() != 36 {
            return None;
        }
        let mut bits = 0u128;
        for (i, c) in text.chars().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != '-' {
                    return None;
                }
                continue;
            }
            let digit = match c {
                '0'..='9' | 'a'..='f' => c.to_digit(16)?,
                _ => return None,
            };
            bits = bits.checked_shl(4)? | u128::from(digit);
        }
        Some(bits)
    }

    /// Whether this is the UID `text` (no allocation: a canonical text is compared as bits).
    fn is(&self, text: &str) -> bool {
        match self {
            Uid::Uuid(bytes) => Self::canonical(text) == Some(u128::from_be_bytes(*bytes)),
            Uid::Text(own) => **own == *text,
        }
    }

    fn text(&self) -> std::borrow::Cow<'a, str> {
        match *self {
            Uid::Text(text) => std::borrow::Cow::Borrowed(text),
            Uid::Uuid(bytes) => {
                // By hand, not `format!`: a UID is told back at every reconcile and every
                // event's claim, and the formatter's widths cost more than the rest of it.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = String::with_capacity(36);
                for (i, byte) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        text.push('-');
                    }
                    for nibble in [byte >> 4, byte & 0xf] {
                        text.push(char::from(HEX[usize::from(nibble)]));
                    }
                }
                std::borrow::Cow::Owned(text)
            }
        }
    }
}

/// A resourceVersion: the API server's are decimal numbers, held inline as one; any other text
/// (a number with a leading zero or a sign included) is held in [`Rare`], as it came.
#[derive(Clone, Debug, PartialEq)]
enum Version<'a> {
    Number(u64),
    Text(&'a str),
}

impl<'a> Version<'a> {
    fn of(text: &'a str) -> Version<'a> {
        Self::number(text).map_or(Version::Text(text), Version::Number)
    }

    /// The number a text is the canonical decimal form of (so telling it back is exact).
    fn number(text: &str) -> Option<u64> {
        let canonical = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        canonical.then(|| text.parse().ok()).flatten()
    }

    fn is(&self, text: &str) -> bool {
        match *self {
            Version::Number(n) => Self::number(text) == Some(n),
            Version::Text(own) => own == text,
        }
    }

    fn text(&self) -> String {
        match *self {
            Version::Number(n) => n.to_string(),
            Version::Text(text) => text.to_owned(),
        }
    }
}

/// A time as whole seconds since the epoch when it has no fraction (as the API server and the
/// controller write times: RFC 3339 to the second); `None` otherwise.
fn whole_seconds(time: &Time) -> Option<i64> {
    (time.0.subsec_nanosecond() == 0).then(|| time.0.as_second())
}

/// The time of [`whole_seconds`] again.
fn from_seconds(seconds: i64) -> Time {
    // Held from a timestamp's own seconds: always in range.
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A tenant's finalizers: one byte; any list but none or the reservation finalizer alone is
/// held in [`Rare`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Finalizers {
    None,
    /// Exactly `[TENANT_FINALIZER]`.
    Reservation,
    Other,
}

/// A status message.
#[derive(Clone, Debug, PartialEq)]
enum Message {
    /// The one an Active tenant's status carries: [`holds`] of its reserved amounts and node.
    Holds,
    /// Boxed whole: a pointer's room where the sentence is the mark (every placed tenant).
    #[allow(clippy::box_collection)] // the extra allocation is the rare case's; see above
    Text(Box<String>),
}

/// The status message of a tenant holding `reserved` on `node`, as the controller writes it
/// (`controller::tenant::status::wanted_status`); `None` for amounts no reservation can hold. Should
/// that sentence change, messages are held as text again: nothing is lost.
fn holds(reserved: &ResourceAmounts, node: &str) -> Option<String> {
    let reserved = reserved.to_resources().ok()?;
    Some(format!("holds {reserved} on {node}"))
}

#[derive(Clone, Debug, PartialEq)]
struct CompactCondition {
    words: Arc<Words>,
    /// lastTransitionTime in whole seconds, unless [`ConditionMore::at`] holds it.
    at: i64,
    /// `None`: no message, no observedGeneration and a time in whole seconds (as the
    /// controller writes `Placed`).
    more: Option<Box<ConditionMore>>,
}

impl PartialEq for Words {
    fn eq(&self, other: &Self) -> bool {
        self.words() == other.words()
    }
}

/// A condition's message and observedGeneration, when it has either.
#[derive(Clone, Debug, PartialEq)]
struct ConditionMore {
    /// `None`: the status message (as the controller wrote `Placed` before 8f3eb07).
    message: Option<Box<str>>,
    observed_generation: Option<i64>,
    /// A lastTransitionTime with a fraction of a second.
    at: Option<Time>,
}

/// A status's conditions: one (nearly every tenant: `Placed`) inline.
#[derive(Clone, Debug, PartialEq)]
enum Conditions {
    One(CompactCondition),
    /// None, or more than one.
    Many(Box<[CompactCondition]>),
}

impl Conditions {
    fn all(&self) -> &[CompactCondition] {
        match self {
            Conditions::One(one) => std::slice::from_ref(one),
            Conditions::Many(all) => all,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct CompactStatus {
    phase: TenantPhase,
    node_name: Option<Arc<str>>,
    message: Message,
    /// [`set::OBSERVED`].
    observed_generation: i64,
    conditions: Conditions,
    /// What few statuses carry: a move, or amounts other than the footprint or zero.
    extra: Option<Box<StatusExtra>>,
}

#[derive(Clone, Debug, PartialEq)]
struct StatusExtra {
    /// The amounts reserved, unless they are the spec's footprint ([`set::FOOTPRINT`]) or zero
    /// (`None`): what an Active tenant and a waiting one hold.
    reserved: Option<ResourceAmounts>,
    migration: Option<MigrationStatus>,
    /// A spread tenant's placements (empty for any other).
    placements: Vec<SpreadPlacement>,
    placed_on: String,
}

impl CompactStatus {
    fn migration(&self) -> Option<&MigrationStatus> {
        self.extra.as_ref()?.migration.as_ref()
    }

    fn placements(&self) -> &[SpreadPlacement] {
        self.extra.as_ref().map_or(&[], |e| &e.placements)
    }
}

/// What a look over the whole cache reads of each tenant before it needs one whole: its phase
/// (`None` without a status), the reason of its `Placed` condition, as
/// [`Tenant::placed_reason`] reads it, and whether its status records a move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Glance {
    pub phase: Option<TenantPhase>,
    pub placed: Option<PlacedReason>,
    pub migrating: bool,
}

impl Glance {
    pub fn of(tenant: &Tenant) -> Glance {
        let status = tenant.status.as_ref();
        Glance {
            phase: status.map(|s| s.phase),
            placed: tenant.placed_reason(),
            migrating: status.is_some_and(|s| s.migration.is_some()),
        }
    }

    /// Whether its status says it waits for room a new machine could give: its first placement
    /// (`PendingCapacity`) or a blocked move. The cache keeps the keys of these
    /// ([`super::TenantCache::each_waiting`]); the look that buys reads nothing else.
    pub fn may_wait(self) -> bool {
        self.phase == Some(TenantPhase::PendingCapacity)
            || self.placed == Some(PlacedReason::MigrationBlocked)
    }
}

/// Which of a tenant's optional numbers are set: bits of [`Compact::set`], so that each is held
/// without an `Option`'s tag (8 bytes apiece once aligned).
mod set {
    /// A canonical resourceVersion (without it: none, or one held in `Rare` as text).
    pub const VERSION: u8 = 1;
    pub const GENERATION: u8 = 1 << 1;
    pub const CREATED: u8 = 1 << 2;
    /// The status's observedGeneration.
    pub const OBSERVED: u8 = 1 << 3;
    /// The status reserves the spec's footprint.
    pub const FOOTPRINT: u8 = 1 << 4;
}

/// `value` when `bit` is set in `set`.
fn when_set<T>(set: u8, bit: u8, value: T) -> Option<T> {
    (set & bit != 0).then_some(value)
}

/// `bit` when `value` is set, and the value held (`T`'s default when not).
fn bit_of<T: Default>(bit: u8, value: Option<T>) -> (u8, T) {
    match value {
        Some(value) => (bit, value),
        None => (0, T::default()),
    }
}

/// A tenant's spec, its node selector boxed: empty for nearly every tenant, and a pointer where
/// the map is 24 bytes.
#[derive(Clone, Debug, PartialEq)]
struct CompactSpec {
    resources: ResourceAmounts,
    /// Without an `Option`'s tag: `has_replicas` says whether it is set.
    replicas: i32,
    has_replicas: bool,
    mode: TenantMode,
    suspend: bool,
    spread: TenantSpread,
    /// `None`: empty. Boxed: a pointer's room for the empty map of nearly every tenant.
    #[allow(clippy::box_collection)]
    node_selector: Option<Box<BTreeMap<String, String>>>,
}

impl CompactSpec {
    fn of(spec: &TenantSpec) -> CompactSpec {
        let TenantSpec {
            resources,
            mode,
            replicas,
            suspend,
            node_selector,
            spread,
        } = spec;
        CompactSpec {
            resources: *resources,
            replicas: replicas.unwrap_or_default(),
            has_replicas: replicas.is_some(),
            mode: *mode,
            suspend: *suspend,
            spread: *spread,
            node_selector: (!node_selector.is_empty()).then(|| Box::new(node_selector.clone())),
        }
    }

    /// The spec's footprint as amounts (`None`: no footprint, e.g. replicas that break the
    /// mode's rule).
    fn footprint(&self) -> Option<ResourceAmounts> {
        // The footprint does not read the node selector.
        self.bare().footprint().ok().map(ResourceAmounts::from)
    }

    /// The spec less its node selector (no allocation).
    fn bare(&self) -> TenantSpec {
        TenantSpec {
            resources: self.resources,
            mode: self.mode,
            replicas: self.has_replicas.then_some(self.replicas),
            suspend: self.suspend,
            node_selector: BTreeMap::new(),
            spread: self.spread,
        }
    }

    fn spec(&self) -> TenantSpec {
        TenantSpec {
            node_selector: self.node_selector.as_deref().cloned().unwrap_or_default(),
            ..self.bare()
        }
    }
}

/// A cached Tenant, less its name and namespace (the cache's key holds them).
#[derive(Clone, Debug, PartialEq)]
pub struct Compact {
    /// A canonical UID's bits (`None`: no UID, or one held in [`Rare`] as text).
    uid: Option<[u8; 16]>,
    /// Which of the numbers below (and the status's observedGeneration) are set: [`set`].
    set: u8,
    /// A canonical resourceVersion ([`set::VERSION`]).
    resource_version: u64,
    generation: i64,
    /// creationTimestamp in whole seconds ([`set::CREATED`]), unless [`Rare`] holds it.
    created: i64,
    /// `deletionTimestamp`, `deletionGracePeriodSeconds`, the `do-not-disrupt` annotation (the
    /// one annotation kept: `strip`) and texts other than the API server's and the controller's
    /// forms, rare (boxed: a pointer otherwise).
    rare: Option<Box<Rare>>,
    finalizers: Finalizers,
    spec: CompactSpec,
    status: Option<CompactStatus>,
}

/// What few tenants carry.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rare {
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    do_not_disrupt: Option<Box<str>>,
    /// A UID not in the canonical form.
    uid: Option<Box<str>>,
    /// A resourceVersion that is not a canonical decimal number.
    resource_version: Option<Box<str>>,
    /// Finalizers other than none or the reservation finalizer alone.
    finalizers: Option<Box<[Box<str>]>>,
    /// A creationTimestamp with a fraction of a second.
    creation_timestamp: Option<Time>,
}

fn compact_condition(
    c: &Condition,
    status_message: &str,
    names: &mut Interner,
) -> CompactCondition {
    let seconds = whole_seconds(&c.last_transition_time);
    let more = match (c.message.as_str(), c.observed_generation, seconds) {
        ("", None, Some(_)) => None,
        (message, observed_generation, seconds) => Some(Box::new(ConditionMore {
            message: (message != status_message).then(|| Box::from(message)),
            observed_generation,
            at: seconds.is_none().then(|| c.last_transition_time.clone()),
        })),
    };
    CompactCondition {
        words: names.words(&c.type_, &c.status, &c.reason),
        at: seconds.unwrap_or_default(),
        more,
    }
}

impl Compact {
    /// The compact form of a stripped tenant.
    pub fn of(tenant: &Tenant, names: &mut Interner) -> Compact {
        let meta = &tenant.metadata;
        let (finalizers, other_finalizers) = match meta.finalizers.as_deref() {
            None => (Finalizers::None, None),
            Some([only]) if only == TENANT_FINALIZER => (Finalizers::Reservation, None),
            Some(all) => (
                Finalizers::Other,
                Some(all.iter().map(|f| Box::from(f.as_str())).collect()),
            ),
        };
        let uid = meta.uid.as_deref().map(Uid::of);
        let version = meta.resource_version.as_deref().map(Version::of);
        let spec = CompactSpec::of(&tenant.spec);
        // A status's amounts held as a mark: its spec's footprint (a bit), or zero (nothing).
        let footprint = spec.footprint();
        let reserves_footprint = tenant.status.as_ref().is_some_and(|s| {
            s.reserved != ResourceAmounts::default() && Some(s.reserved) == footprint
        });
        let status = tenant.status.as_ref().map(|status| {
            let node = status.node_name.as_str();
            let message = if !node.is_empty()
                && holds(&status.reserved, node).is_some_and(|holds| holds == status.message)
            {
                Message::Holds
            } else {
                Message::Text(Box::new(status.message.clone()))
            };
            let conditions = match status.conditions.as_slice() {
                [one] => Conditions::One(compact_condition(one, &status.message, names)),
                all => Conditions::Many(
                    all.iter()
                        .map(|c| compact_condition(c, &status.message, names))
                        .collect(),
                ),
            };
            CompactStatus {
                phase: status.phase,
                node_name: (!node.is_empty()).then(|| names.intern(node)),
                extra: {
                    let extra = StatusExtra {
                        reserved: (status.reserved != ResourceAmounts::default()
                            && !reserves_footprint)
                            .then_some(status.reserved),
                        migration: status.migration.clone(),
                        placements: status.placements.clone(),
                        placed_on: status.placed_on.clone(),
                    };
                    (extra.reserved.is_some()
                        || extra.migration.is_some()
                        || !extra.placements.is_empty()
                        || !extra.placed_on.is_empty())
                    .then(|| Box::new(extra))
                },
                message,
                observed_generation: status.observed_generation.unwrap_or_default(),
                conditions,
            }
        });
        let (version_bit, resource_version) = bit_of(
            set::VERSION,
            match version {
                Some(Version::Number(n)) => Some(n),
                _ => None,
            },
        );
        let (generation_bit, generation) = bit_of(set::GENERATION, meta.generation);
        let (created_bit, created) = match &meta.creation_timestamp {
            Some(time) => (set::CREATED, whole_seconds(time)),
            None => (0, None),
        };
        let observed_bit = tenant
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .map_or(0, |_| set::OBSERVED);
        let footprint_bit = if reserves_footprint {
            set::FOOTPRINT
        } else {
            0
        };
        Compact {
            uid: match uid {
                Some(Uid::Uuid(bytes)) => Some(bytes),
                _ => None,
            },
            set: version_bit | generation_bit | created_bit | observed_bit | footprint_bit,
            resource_version,
            generation,
            created: created.unwrap_or_default(),
            rare: {
                let rare = Rare {
                    deletion_timestamp: meta.deletion_timestamp.clone(),
                    deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
                    do_not_disrupt: meta
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(DO_NOT_DISRUPT_ANNOTATION))
                        .map(|v| Box::from(v.as_str())),
                    uid: match uid {
                        Some(Uid::Text(text)) => Some(Box::from(text)),
                        _ => None,
                    },
                    resource_version: match version {
                        Some(Version::Text(text)) => Some(Box::from(text)),
                        _ => None,
                    },
                    finalizers: other_finalizers,
                    creation_timestamp: meta
                        .creation_timestamp
                        .clone()
                        .filter(|_| created.is_none()),
                };
                (rare != Rare::default()).then(|| Box::new(rare))
            },
            finalizers,
            spec,
            status,
        }
    }

    fn uid_held(&self) -> Option<Uid<'_>> {
        match self.uid {
            Some(bytes) => Some(Uid::Uuid(bytes)),
            None => self.rare.as_ref()?.uid.as_deref().map(Uid::Text),
        }
    }

    fn version_held(&self) -> Option<Version<'_>> {
        match when_set(self.set, set::VERSION, self.resource_version) {
            Some(n) => Some(Version::Number(n)),
            None => self
                .rare
                .as_ref()?
                .resource_version
                .as_deref()
                .map(Version::Text),
        }
    }

    pub fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.uid_held().map(|uid| uid.text())
    }

    /// Whether its UID is `uid` (both none, or the same text), without telling it back.
    pub fn has_uid(&self, uid: Option<&str>) -> bool {
        match (self.uid_held(), uid) {
            (Some(own), Some(uid)) => own.is(uid),
            (None, None) => true,
            _ => false,
        }
    }

    /// What its status reserves (`None` without a status).
    fn reserved(&self) -> Option<ResourceAmounts> {
        let status = self.status.as_ref()?;
        Some(match status.extra.as_ref().and_then(|e| e.reserved) {
            Some(other) => other,
            None if self.set & set::FOOTPRINT != 0 => self.spec.footprint().unwrap_or_default(),
            None => ResourceAmounts::default(),
        })
    }

    pub fn generation(&self) -> Option<i64> {
        when_set(self.set, set::GENERATION, self.generation)
    }

    /// What its status claims to hold (`None` without a UID), read without telling it back.
    pub fn claim(&self) -> Option<Claim> {
        let status = self.status.as_ref();
        Some(Claim {
            uid: self.uid()?.into(),
            node: status
                .and_then(|s| s.node_name.clone())
                .unwrap_or_else(|| Arc::from("")),
            reserved: self.reserved().unwrap_or_default(),
            phase: status.map(|s| s.phase).unwrap_or_default(),
            moving_to: status
                .and_then(CompactStatus::migration)
                .map(|m| Arc::from(m.to.as_str())),
            spread_to: status
                .map(|s| {
                    crate::api::spread_to(
                        s.node_name.as_deref().unwrap_or_default(),
                        s.placements(),
                    )
                })
                .unwrap_or_default(),
        })
    }

    /// The node its status names, if it has this UID: `Some(None)` when the status names none;
    /// `on` itself when it is one of a spread tenant's placements.
    /// Allocates nothing (node repair asks it for every entry of every changed node).
    pub fn node_named_if_uid(&self, uid: &str, on: &str) -> Option<Option<Arc<str>>> {
        self.uid_held().filter(|own| own.is(uid))?;
        let status = self.status.as_ref();
        // A spread tenant's status names each node of its placements (a name allocated for
        // spread tenants only).
        if status.is_some_and(|s| s.placements().iter().any(|p| p.node == on)) {
            return Some(Some(Arc::from(on)));
        }
        Some(status.and_then(|s| s.node_name.clone()))
    }

    /// Whether this is the version of this resourceVersion.
    pub fn is_version(&self, resource_version: Option<&str>) -> bool {
        resource_version
            .zip(self.version_held())
            .is_some_and(|(text, own)| own.is(text))
    }

    /// Its [`Glance`], read without telling it back.
    pub fn glance(&self) -> Glance {
        let status = self.status.as_ref();
        let placed = status
            .and_then(|s| {
                s.conditions
                    .all()
                    .iter()
                    .find(|c| *c.words.type_ == *PLACED_CONDITION)
            })
            .and_then(|c| PlacedReason::parse(&c.words.reason));
        Glance {
            phase: status.map(|s| s.phase),
            placed,
            migrating: status.is_some_and(|s| s.migration().is_some()),
        }
    }

    /// Whether it rests where it is and may be moved for room, read without telling it back.
    pub fn resting(&self) -> Resting<'_> {
        let status = self.status.as_ref();
        Resting {
            phase: status.map(|s| s.phase),
            migrating: status.is_some_and(|s| s.migration().is_some()),
            deleting: self.is_deleting(),
            suspended: self.spec.suspend,
            do_not_disrupt: self.rare.as_ref().and_then(|r| r.do_not_disrupt.as_deref()),
            spread: !self.spec.spread.is_none(),
        }
    }

    /// The node a move its status records leaves.
    pub fn moving_from(&self) -> Option<&str> {
        let migration = self.status.as_ref()?.migration()?;
        Some(&migration.from)
    }

    /// Its node selector (`None`: empty).
    pub fn selector(&self) -> Option<&BTreeMap<String, String>> {
        self.spec.node_selector.as_deref()
    }

    pub fn is_deleting(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| r.deletion_timestamp.is_some())
    }

    /// The whole tenant again, named `name` in `namespace`.
    pub fn tenant(&self, name: &str, namespace: Option<&str>) -> Tenant {
        let finalizers = match self.finalizers {
            Finalizers::None => None,
            Finalizers::Reservation => Some(vec![TENANT_FINALIZER.to_owned()]),
            Finalizers::Other => self
                .rare
                .as_ref()
                .and_then(|r| r.finalizers.as_ref())
                .map(|all| all.iter().map(|f| f.to_string()).collect()),
        };
        let status = self.status.as_ref().map(|status| {
            let reserved = self.reserved().unwrap_or_default();
            let node = status.node_name.as_deref().unwrap_or_default();
            let message = match &status.message {
                // Made only where `holds` gave the message.
                Message::Holds => holds(&reserved, node).unwrap_or_default(),
                Message::Text(text) => String::clone(text),
            };
            let conditions = status
                .conditions
                .all()
                .iter()
                .map(|c| {
                    let more = c.more.as_deref();
                    Condition {
                        type_: c.words.type_.to_string(),
                        status: c.words.status.to_string(),
                        reason: c.words.reason.to_string(),
                        message: match more {
                            Some(ConditionMore { message: None, .. }) => message.clone(),
                            Some(ConditionMore {
                                message: Some(own), ..
                            }) => own.to_string(),
                            None => String::new(),
                        },
                        last_transition_time: more
                            .and_then(|m| m.at.clone())
                            .unwrap_or_else(|| from_seconds(c.at)),
                        observed_generation: more.and_then(|m| m.observed_generation),
                    }
                })
                .collect();
            TenantStatus {
                phase: status.phase,
                node_name: node.to_owned(),
                reserved,
                message,
                observed_generation: when_set(self.set, set::OBSERVED, status.observed_generation),
                conditions,
                migration: status.migration().cloned(),
                placements: status.placements().to_vec(),
                placed_on: status
                    .extra
                    .as_ref()
                    .map(|e| e.placed_on.clone())
                    .unwrap_or_default(),
            }
        });
        Tenant {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: namespace.map(str::to_owned),
                uid: self.uid().map(std::borrow::Cow::into_owned),
                resource_version: self.version_held().map(|v| v.text()),
                generation: self.generation(),
                creation_timestamp: when_set(self.set, set::CREATED, self.created).map(|seconds| {
                    self.rare
                        .as_ref()
                        .and_then(|r| r.creation_timestamp.clone())
                        .unwrap_or_else(|| from_seconds(seconds))
                }),
                deletion_timestamp: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.deletion_timestamp.clone()),
                deletion_grace_period_seconds: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.deletion_grace_period_seconds),
                finalizers,
                annotations: self
                    .rare
                    .as_ref()
                    .and_then(|r| r.do_not_disrupt.as_ref())
                    .map(|v| {
                        std::collections::BTreeMap::from([(
                            DO_NOT_DISRUPT_ANNOTATION.to_owned(),
                            v.to_string(),
                        )])
                    }),
                ..ObjectMeta::default()
            },
            spec: self.spec.spec(),
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::arithmetic_side_effects,
        clippy::type_complexity
    )]
    use super::*;
    use crate::api::TenantMode;
    use crate::controller::state::strip;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A time; one in five has a fraction of a second (which the cache holds aside).
    fn time(seconds: i64) -> Time {
        let nanos = if seconds % 5 == 0 {
            i32::try_from(seconds % 1_000_000_000).unwrap().max(1)
        } else {
            0
        };
        Time(Timestamp::new(seconds, nanos).unwrap())
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z0-9 ,;-]{1,40}"]
    }

    fn condition(status_message: String) -> impl Strategy<Value = Condition> {
        (
            prop_oneof![Just("Placed".to_owned()), "[A-Z][a-z]{0,8}"],
            prop_oneof![Just("True".to_owned()), Just("False".to_owned())],
            prop_oneof![
                Just("Reserved".to_owned()),
                Just("MigrationBlocked".to_owned()),
                "[A-Z][a-zA-Z]{0,12}"
            ],
            prop_oneof![Just(status_message), text()],
            0i64..2_000_000_000,
            proptest::option::of(0i64..100),
        )
            .prop_map(
                |(type_, status, reason, message, at, observed_generation)| Condition {
                    type_,
                    status,
                    reason,
                    message,
                    last_transition_time: time(at),
                    observed_generation,
                },
            )
    }

    fn status() -> impl Strategy<Value = TenantStatus> {
        (
            prop_oneof![
                Just(TenantPhase::Active),
                Just(TenantPhase::PendingCapacity),
                Just(TenantPhase::Migrating)
            ],
            prop_oneof![Just(String::new()), "node-[a-c]"],
            (0i64..100, 0i64..100, 0i64..100),
            text(),
            proptest::option::of(0i64..100),
            proptest::option::of(("node-[a-c]", "node-[a-c]")),
            any::<bool>(),
        )
            .prop_flat_map(
                |(
                    phase,
                    node_name,
                    (t, m, s),
                    message,
                    observed_generation,
                    migration,
                    holding,
                )| {
                    // Often the sentence the controller writes for a tenant that holds room.
                    let reserved = ResourceAmounts {
                        threads: t,
                        memory_gb: m,
                        storage_gb: s,
                    };
                    let message = holds(&reserved, &node_name)
                        .filter(|_| holding)
                        .unwrap_or(message);
                    proptest::collection::vec(condition(message.clone()), 0..3).prop_map(
                        move |conditions| TenantStatus {
                            phase,
                            node_name: node_name.clone(),
                            reserved,
                            message: message.clone(),
                            observed_generation,
                            conditions,
                            migration: migration
                                .clone()
                                .map(|(from, to)| MigrationStatus { from, to }),
                            // A spread tenant's placements, in a third of the statuses.
                            placements: (0..(t % 3))
                                .map(|i| SpreadPlacement {
                                    node: format!("node-{i}"),
                                    zone: if m % 2 == 0 {
                                        format!("z{i}")
                                    } else {
                                        String::new()
                                    },
                                    replicas: 1,
                                })
                                .collect(),
                            placed_on: if t % 3 == 2 {
                                "node-0,node-1".to_owned()
                            } else {
                                String::new()
                            },
                        },
                    )
                },
            )
    }

    fn finalizers() -> impl Strategy<Value = Option<Vec<String>>> {
        proptest::option::of(proptest::collection::vec(
            prop_oneof![Just(TENANT_FINALIZER.to_owned()), "[a-z./]{1,20}"],
            0..3,
        ))
    }

    fn tenant() -> impl Strategy<Value = Tenant> {
        (
            ("[a-z]{1,8}", proptest::option::of("[a-z]{1,8}")),
            (
                proptest::option::of("[a-f0-9-]{1,36}"),
                proptest::option::of("[0-9]{1,8}"),
            ),
            (
                proptest::option::of(0i64..100),
                proptest::option::of(0i64..2_000_000_000),
                proptest::option::of(0i64..2_000_000_000),
                proptest::option::of(0i64..60),
            ),
            (finalizers(), proptest::option::of("true|false|[a-z]{0,5}")),
            (
                1i64..100,
                1i64..100,
                0i64..100,
                any::<bool>(),
                proptest::option::of(1i32..10),
                any::<bool>(),
            ),
            proptest::collection::btree_map("[a-z]{1,5}", "[a-z]{0,5}", 0..3),
            proptest::option::of(status()),
        )
            .prop_map(
                |(
                    (name, namespace),
                    (uid, rv),
                    (generation, created, deleted, grace),
                    (finalizers, do_not_disrupt),
                    (t, m, s, cluster, replicas, suspend),
                    node_selector,
                    status,
                ): (
                    (String, Option<String>),
                    (Option<String>, Option<String>),
                    (Option<i64>, Option<i64>, Option<i64>, Option<i64>),
                    (Option<Vec<String>>, Option<String>),
                    (i64, i64, i64, bool, Option<i32>, bool),
                    BTreeMap<String, String>,
                    Option<TenantStatus>,
                )| {
                    let mut tenant = Tenant {
                        metadata: ObjectMeta {
                            name: Some(name),
                            namespace,
                            uid,
                            resource_version: rv,
                            generation,
                            creation_timestamp: created.map(time),
                            deletion_timestamp: deleted.map(time),
                            deletion_grace_period_seconds: grace,
                            finalizers,
                            labels: Some(BTreeMap::from([("pool".into(), "eu".into())])),
                            // The one annotation kept, beside one dropped.
                            annotations: Some(
                                do_not_disrupt
                                    .map(|v| (DO_NOT_DISRUPT_ANNOTATION.to_owned(), v))
                                    .into_iter()
                                    .chain([("note".to_owned(), "dropped".to_owned())])
                                    .collect(),
                            ),
                            ..ObjectMeta::default()
                        },
                        spec: TenantSpec {
                            resources: ResourceAmounts {
                                threads: t,
                                memory_gb: m,
                                storage_gb: s,
                            },
                            mode: if cluster {
                                TenantMode::Cluster
                            } else {
                                TenantMode::Standalone
                            },
                            replicas,
                            suspend,
                            node_selector,
                            spread: [TenantSpread::None, TenantSpread::Nodes, TenantSpread::Zones]
                                [usize::try_from(s % 3).unwrap_or(0)],
                        },
                        status,
                    };
                    strip::strip(&mut tenant);
                    tenant
                },
            )
    }

    proptest! {
        #[test]
        fn a_compact_tenant_gives_back_the_stripped_tenant_it_was_made_from(tenant in tenant()) {
            let mut names = Interner::default();
            let compact = Compact::of(&tenant, &mut names);
            let back = compact.tenant(
                tenant.metadata.name.as_deref().unwrap(),
                tenant.metadata.namespace.as_deref(),
            );
            // Tenant has no PartialEq (kube's derive): compare what the API would see.
            prop_assert_eq!(compact.claim(), Claim::of(&tenant));
            prop_assert_eq!(compact.glance(), Glance::of(&tenant));
            // What make-room reads without telling it back is what the whole tenant says.
            prop_assert_eq!(
                compact.resting().may_move(),
                crate::controller::make_room::may_move(&tenant)
            );
            prop_assert_eq!(
                compact.moving_from(),
                tenant.status.as_ref().and_then(|s| s.migration.as_ref()).map(|m| m.from.as_str())
            );
            prop_assert_eq!(compact.selector(), tenant.spec.selector());
            prop_assert_eq!(back.metadata, tenant.metadata);
            prop_assert_eq!(back.spec, tenant.spec);
            prop_assert_eq!(back.status, tenant.status);
        }
    }

    #[test]
    fn a_canonical_uid_is_held_as_its_bits_and_told_back_exactly() {
        let uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        assert!(matches!(Uid::of(uid), Uid::Uuid(_)));
        assert_eq!(Uid::of(uid).text(), uid);
        // Upper case, or anything else, is kept as it came.
        for text in [
            "0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D",
            "uid-1",
            "",
            "0a1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d",
        ] {
            assert!(matches!(Uid::of(text), Uid::Text(_)), "{text}");
            assert_eq!(Uid::of(text).text(), text);
        }
        // Every digit told back in its place (the bits of a UID spelled by hand).
        let digits = "01234567-89ab-cdef-0123-456789abcdef";
        assert_eq!(Uid::of(digits).text(), digits);
        // A tenant's UID is matched without telling it back: the same text only.
        let mut names = Interner::default();
        let mut with = |uid: Option<&str>| {
            let mut t = crate::testing::tenant("a").build();
            t.metadata.uid = uid.map(str::to_owned);
            Compact::of(&t, &mut names)
        };
        assert!(with(Some(uid)).has_uid(Some(uid)));
        assert!(!with(Some(uid)).has_uid(Some(&uid.to_uppercase())));
        assert!(!with(Some(uid)).has_uid(Some(digits)));
        assert!(!with(Some(uid)).has_uid(None));
        assert!(with(Some("uid-1")).has_uid(Some("uid-1")));
        assert!(!with(Some("uid-1")).has_uid(Some("uid-2")));
        assert!(!with(None).has_uid(Some("uid-1")));
        assert!(with(None).has_uid(None));
    }

    #[test]
    fn a_compact_tenant_is_smaller_than_a_tenant() {
        // What each cached tenant costs before any of its strings.
        assert!(
            std::mem::size_of::<Compact>() * 2 < std::mem::size_of::<Tenant>(),
            "{} against {}",
            std::mem::size_of::<Compact>(),
            std::mem::size_of::<Tenant>()
        );
    }

    #[test]
    fn node_names_and_condition_words_are_shared_and_pruned_when_unused() {
        let mut names = Interner::default();
        let placed = |node: &str| {
            crate::testing::tenant("a")
                .on(node)
                .placed("Reserved")
                .build()
        };
        let first = Compact::of(&placed("node-eu-1"), &mut names);
        let second = Compact::of(&placed("node-eu-1"), &mut names);
        let (Some(a), Some(b)) = (&first.status, &second.status) else {
            panic!("both have a status");
        };
        assert!(Arc::ptr_eq(
            a.node_name.as_ref().unwrap(),
            b.node_name.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(
            &a.conditions.all()[0].words,
            &b.conditions.all()[0].words
        ));
        drop((first, second));
        names.prune();
        assert!(names.names.is_empty() && names.words.is_empty());
    }

    #[test]
    fn what_the_controller_writes_is_held_as_marks_and_told_back_exactly() {
        let mut names = Interner::default();
        let reserved = ResourceAmounts {
            threads: 2,
            memory_gb: 8,
            storage_gb: 120,
        };
        let mut tenant = crate::testing::tenant("a")
            .uid("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
            .resource_version(1_000_123)
            .on("node-eu-1")
            .reserved(2, 8, 120)
            .message(&holds(&reserved, "node-eu-1").unwrap())
            .placed("Reserved")
            .build();
        if let Some(status) = tenant.status.as_mut() {
            // As the controller writes `Placed` now: no sentence, no generation; and as the
            // API server tells the time: whole seconds.
            status.conditions[0].message = String::new();
            status.conditions[0].last_transition_time = time(1_700_000_001);
        }
        let compact = Compact::of(&tenant, &mut names);
        let status = compact.status.as_ref().unwrap();
        assert_eq!(status.message, Message::Holds);
        assert!(matches!(&status.conditions, Conditions::One(c) if c.more.is_none()));
        assert_eq!(compact.version_held(), Some(Version::Number(1_000_123)));
        assert!(compact.uid.is_some() && compact.rare.is_none());
        let back = compact.tenant("a", Some("default"));
        assert_eq!(back.metadata, tenant.metadata);
        assert_eq!(back.status, tenant.status);
        // Versions that are not a canonical number are kept as text.
        for text in ["007", "+1", "", "18446744073709551616", "abc"] {
            assert!(matches!(Version::of(text), Version::Text(_)), "{text}");
            assert_eq!(Version::of(text).text(), text);
        }
        assert!(Version::of("0").is("0") && !Version::of("10").is("010"));
        // The same sentence on another node, or other amounts, is text.
        let other = holds(&reserved, "node-eu-2").unwrap();
        tenant.status.as_mut().unwrap().message = other;
        let compact = Compact::of(&tenant, &mut names);
        assert!(matches!(
            compact.status.as_ref().unwrap().message,
            Message::Text(_)
        ));
        assert_eq!(compact.tenant("a", Some("default")).status, tenant.status);
    }

    #[test]
    fn a_compact_tenant_stays_small() {
        // One per cached tenant: each 16 bytes more is 1.6 MB at 100,000 tenants (malloc
        // rounds an allocation with its 8-byte header up to 16).
        let size = std::mem::size_of::<Compact>();
        assert!(size <= 168, "{size} bytes");
    }

    #[test]
    fn a_status_reserving_its_footprint_or_nothing_holds_no_amounts() {
        let mut names = Interner::default();
        let cluster = || {
            crate::testing::tenant("a")
                .resources(2, 8, 10)
                .mode(TenantMode::Cluster)
                .replicas(3)
        };
        let cases = [
            (cluster().on("n1").reserved(6, 24, 30).build(), true, false),
            (cluster().phase(TenantPhase::Pending).build(), false, false),
            // A resize not yet placed: the old amounts are held as they are.
            (cluster().on("n1").reserved(4, 16, 20).build(), false, true),
        ];
        for (tenant, footprint, boxed) in cases {
            let compact = Compact::of(&tenant, &mut names);
            assert_eq!(compact.set & set::FOOTPRINT != 0, footprint);
            let extra = compact.status.as_ref().unwrap().extra.as_ref();
            assert_eq!(extra.and_then(|e| e.reserved).is_some(), boxed);
            let back = compact.tenant("a", Some("default"));
            assert_eq!(back.status, tenant.status);
            assert_eq!(back.spec, tenant.spec);
        }
    }
}
