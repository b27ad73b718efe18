//! Where a `Cluster` tenant's replicas go when they must survive a host: one per node
//! (`Spread::Nodes`), or balanced across zones (`Spread::Zones`). Decided whole, all or none:
//! either every replica has a node, or the answer says why none is placed.
//!
//! Rules enforced here (docs/placement.md, "Spread"):
//! - only nodes that take new tenants are considered (`NodeView::takes_new_tenants`), and the
//!   nodes that hold the tenant already unless they are draining (a cordoned or over-full node
//!   keeps what it holds); the caller has already kept only the nodes carrying the tenant's node
//!   selector;
//! - what the tenant holds is kept where the rules allow (after a crash between writes, a
//!   replicas change, a resize, a mode change): a node holding it has room for one replica when
//!   the footprint fits in its free room plus the tenant's own entry there; held nodes are
//!   chosen first, so no placement moves more than it must. Under `Zones` the zones that get one
//!   replica more are those holding the most already, then by name: fewer replicas are taken
//!   from the zone with the most;
//! - a spread replica holds one footprint on its node, and no node holds two replicas of one
//!   tenant;
//! - `Nodes`: the first `replicas` nodes by name with room for one replica each;
//! - `Zones`: a node's zone is its zone label; a node without one is in no zone and takes no
//!   spread replica. The zones are those of the nodes considered, room or not (a zone that is
//!   full still counts: placing around it would break the balance). With `R` replicas over `Z`
//!   zones each zone gets `R / Z` or one more, so no zone holds more than one replica above
//!   another; the zones that get one more are (after those holding the most) the first, by name,
//!   with room for it. Inside a zone, replicas go to its first nodes by name with room, after
//!   the ones holding the tenant (first fit, where spread allows it);
//! - no fit is data: how many replicas were asked, with what footprint, and which zones (or how
//!   many nodes) had room.
//!
//! ```text
//!   3 replicas of 2 thr, Zones; zones fsn1 (a1 full, a2), hel1 (c1), nbg1 (b1, b2)
//!   -> one per zone: fsn1/a2, hel1/c1, nbg1/b1
//! ```

use std::collections::BTreeMap;
use std::fmt;

use crate::fit::NodeView;
use crate::resources::Resources;

/// How a tenant's replicas are spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Spread {
    /// Every replica on one node: the seed's arithmetic (not decided here).
    #[default]
    None,
    /// Each replica on a different node.
    Nodes,
    /// Replicas balanced across zones (skew at most one), never two on one node.
    Zones,
}

/// A node as spreading reads it: its view, its zone label, if any, and the tenant's own entry on
/// it, if it holds one (any number of replicas: `None` spread holds them all on one node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZonedNode<'a> {
    pub view: NodeView<'a>,
    pub zone: Option<&'a str>,
    pub held: Option<Resources>,
}

impl ZonedNode<'_> {
    /// Considered for the tenant: it takes new tenants, or it holds the tenant and is not
    /// draining.
    fn considered(&self) -> bool {
        self.view.takes_new_tenants()
            || (self.held.is_some() && self.view.state != crate::fit::NodeState::Draining)
    }

    /// Room for one replica of `footprint`, its own entry there counted as free.
    pub(crate) fn has_room(&self, footprint: Resources) -> bool {
        let own = self.held.unwrap_or(Resources::ZERO);
        let free = self
            .view
            .free()
            .checked_add(own)
            .unwrap_or(self.view.capacity);
        footprint.fits_within(&free)
    }
}

/// One replica's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica<'a> {
    pub node: &'a str,
    pub zone: Option<&'a str>,
}

/// Why a spread tenant is not placed: nothing of it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadNoFit {
    pub spread: Spread,
    pub replicas: u32,
    /// One replica's footprint.
    pub footprint: Resources,
    /// Nodes considered with room for one replica.
    pub nodes_with_room: usize,
    /// `Zones`: how many zones the replicas must be spread over (the zones considered, or as
    /// many as there are replicas when fewer), and the zones with room for one replica, by name.
    pub zones_needed: usize,
    pub zones_with_room: Vec<String>,
}

impl fmt::Display for SpreadNoFit {
    /// `needs 3 zones with room for 1 replica each (2 threads, 4 GB, 20 GB); zones with room:
    /// fsn1, nbg1`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let each = format!(
            "{} threads, {} GB, {} GB",
            self.footprint.threads, self.footprint.memory_gb, self.footprint.storage_gb
        );
        match self.spread {
            Spread::Zones => {
                let zones = u32::try_from(self.zones_needed).unwrap_or(u32::MAX).max(1);
                let per_zone = self.replicas.div_ceil(zones);
                write!(
                    f,
                    "needs {} zones with room for {per_zone} replica(s) each ({each}) on as many nodes; zones with room: {}",
                    self.zones_needed,
                    if self.zones_with_room.is_empty() {
                        "none".to_owned()
                    } else {
                        self.zones_with_room.join(", ")
                    }
                )
            }
            Spread::Nodes | Spread::None => write!(
                f,
                "needs {} nodes with room for 1 replica each ({each}); nodes with room: {}",
                self.replicas, self.nodes_with_room
            ),
        }
    }
}

/// Where each of `replicas` replicas of `footprint` goes under `spread` (`Nodes` or `Zones`),
/// by node name; `None` is not spread (the caller places it whole on one node) and asks for
/// nothing here. Pure.
pub fn place_spread<'a>(
    nodes: &[ZonedNode<'a>],
    spread: Spread,
    replicas: u32,
    footprint: Resources,
) -> Result<Vec<Replica<'a>>, SpreadNoFit> {
    let mut considered: Vec<&ZonedNode<'a>> = nodes
        .iter()
        .filter(|n| n.considered())
        .filter(|n| spread != Spread::Zones || n.zone.is_some())
        .collect();
    // Held nodes first, then by name: what the tenant holds is kept before anything is added.
    considered
        .sort_by(|a, b| (a.held.is_none(), a.view.name).cmp(&(b.held.is_none(), b.view.name)));
    let with_room: Vec<&ZonedNode<'a>> = considered
        .iter()
        .copied()
        .filter(|n| n.has_room(footprint))
        .collect();
    let wanted = usize::try_from(replicas).unwrap_or(usize::MAX);
    if wanted == 0 {
        return Ok(Vec::new());
    }
    // Per zone (by name): its nodes with room, in name order; every zone considered has a line.
    let mut zones: BTreeMap<&'a str, Vec<&ZonedNode<'a>>> = BTreeMap::new();
    for node in &considered {
        if let Some(zone) = node.zone {
            zones.entry(zone).or_default();
        }
    }
    for node in &with_room {
        if let Some(zone) = node.zone {
            zones.entry(zone).or_default().push(node);
        }
    }
    let no_fit = |zones_needed: usize| SpreadNoFit {
        spread,
        replicas,
        footprint,
        nodes_with_room: with_room.len(),
        zones_needed,
        zones_with_room: zones
            .iter()
            .filter(|(_, room)| !room.is_empty())
            .map(|(zone, _)| (*zone).to_owned())
            .collect(),
    };
    let chosen: Vec<&ZonedNode<'a>> = match spread {
        Spread::None => Vec::new(),
        Spread::Nodes => match with_room.get(..wanted) {
            Some(first) => first.to_vec(),
            None => return Err(no_fit(0)),
        },
        Spread::Zones => {
            let count = zones.len();
            if count == 0 {
                return Err(no_fit(wanted));
            }
            // `count` > 0: checked division and remainder cannot fail; `extra` < `count`.
            let each = wanted.checked_div(count).unwrap_or(0);
            let mut extra = wanted.checked_rem(count).unwrap_or(0);
            let mut chosen: Vec<&ZonedNode<'a>> = Vec::with_capacity(wanted);
            // Every zone takes `each`; the zones holding the most, then the first by name, with
            // room for one more take the `extra` (a zone that cannot is passed over, never
            // overfilled).
            let mut order: Vec<(&&'a str, &Vec<&ZonedNode<'a>>)> = zones.iter().collect();
            order.sort_by_key(|(zone, room)| {
                let held = room.iter().filter(|n| n.held.is_some()).count();
                (std::cmp::Reverse(held), **zone)
            });
            for (_, room) in order {
                let take = match room.get(..each) {
                    None => return Err(no_fit(count.min(wanted))),
                    Some(_) if extra > 0 && room.len() > each => {
                        extra = extra.saturating_sub(1);
                        room.len().min(each.saturating_add(1))
                    }
                    Some(_) => each,
                };
                chosen.extend(room.iter().take(take));
            }
            if extra > 0 {
                return Err(no_fit(count.min(wanted)));
            }
            chosen
        }
    };
    let mut chosen = chosen;
    chosen.sort_by(|a, b| a.view.name.cmp(b.view.name));
    Ok(chosen
        .into_iter()
        .map(|n| Replica {
            node: n.view.name,
            zone: n.zone,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
    use super::*;
    use crate::fit::NodeState;

    fn zoned(name: &'static str, zone: Option<&'static str>, free: u64) -> ZonedNode<'static> {
        crate::testing::zoned(name, zone, free, None)
    }

    fn placed<'a>(got: &[Replica<'a>]) -> Vec<&'a str> {
        got.iter().map(|r| r.node).collect()
    }

    #[test]
    fn the_examples_of_the_rules() {
        let two = Resources::new(2, 1, 1);
        let fleet = [
            zoned("a1", Some("fsn1"), 1),
            zoned("a2", Some("fsn1"), 8),
            zoned("b2", Some("nbg1"), 8),
            zoned("b1", Some("nbg1"), 8),
            zoned("c1", Some("hel1"), 8),
            zoned("x", None, 8),
        ];
        type Want = Result<&'static [&'static str], &'static str>;
        let cases: &[(Spread, u32, Want)] = &[
            (Spread::Zones, 3, Ok(&["a2", "b1", "c1"])),
            // Four over three zones: the first zone by name with room for two takes two.
            (Spread::Zones, 4, Ok(&["a2", "b1", "b2", "c1"])),
            // fsn1 and hel1 have room for one each: six needs two per zone.
            (
                Spread::Zones,
                6,
                Err(
                    "needs 3 zones with room for 2 replica(s) each (2 threads, 1 GB, 1 GB) on as many nodes; zones with room: fsn1, hel1, nbg1",
                ),
            ),
            (Spread::Zones, 1, Ok(&["a2"])),
            // Nodes: the first by name with room, zone or none.
            (Spread::Nodes, 3, Ok(&["a2", "b1", "b2"])),
            (Spread::Nodes, 5, Ok(&["a2", "b1", "b2", "c1", "x"])),
            (
                Spread::Nodes,
                6,
                Err(
                    "needs 6 nodes with room for 1 replica each (2 threads, 1 GB, 1 GB); nodes with room: 5",
                ),
            ),
        ];
        for (spread, replicas, want) in cases {
            let got = place_spread(&fleet, *spread, *replicas, two);
            match want {
                Ok(nodes) => assert_eq!(placed(&got.unwrap()), *nodes, "{spread:?} x{replicas}"),
                Err(words) => assert_eq!(got.unwrap_err().to_string(), *words),
            }
        }
    }

    #[test]
    fn a_full_zone_still_counts_and_holds_the_others_back() {
        let fleet = [
            zoned("a1", Some("fsn1"), 0),
            zoned("b1", Some("nbg1"), 8),
            zoned("b2", Some("nbg1"), 8),
            zoned("c1", Some("hel1"), 8),
        ];
        let got = place_spread(&fleet, Spread::Zones, 3, Resources::new(2, 1, 1));
        let no_fit = got.unwrap_err();
        assert_eq!(no_fit.zones_needed, 3);
        assert_eq!(no_fit.zones_with_room, ["hel1", "nbg1"]);
        // Two replicas need two zones of three: hel1 and nbg1 take them.
        let got = place_spread(&fleet, Spread::Zones, 2, Resources::new(2, 1, 1)).unwrap();
        assert_eq!(placed(&got), ["b1", "c1"]);
    }

    #[test]
    fn what_the_tenant_holds_is_kept_where_the_rules_allow() {
        let one = Resources::new(2, 1, 1);
        let holding = |mut n: ZonedNode<'static>, own: Resources| {
            n.held = Some(own);
            n
        };
        // Half placed before a crash: b2 and c1 hold a replica each; a full cordoned node that
        // holds one keeps it.
        let mut cordoned = zoned("a9", Some("fsn1"), 0);
        cordoned.view.state = NodeState::Cordoned;
        let fleet = [
            zoned("a1", Some("fsn1"), 8),
            holding(cordoned, one),
            zoned("b1", Some("nbg1"), 8),
            holding(zoned("b2", Some("nbg1"), 8), one),
            holding(zoned("c1", Some("hel1"), 8), one),
        ];
        let got = place_spread(&fleet, Spread::Zones, 3, one).unwrap();
        assert_eq!(placed(&got), ["a9", "b2", "c1"]);
        // Four: the extra replica goes to a zone holding one already (fsn1 first by name), on a
        // node with room. Two: every zone holds one, so the first two by name keep theirs.
        let got = place_spread(&fleet, Spread::Zones, 4, one).unwrap();
        assert_eq!(placed(&got), ["a1", "a9", "b2", "c1"]);
        let got = place_spread(&fleet, Spread::Zones, 2, one).unwrap();
        assert_eq!(placed(&got), ["a9", "c1"]);
        // Nodes: held first, then the first by name.
        let got = place_spread(&fleet, Spread::Nodes, 4, one).unwrap();
        assert_eq!(placed(&got), ["a1", "a9", "b2", "c1"]);
        // A resize to 9 threads: a9 (cordoned, full) cannot take it, whatever it holds.
        let got = place_spread(&fleet, Spread::Zones, 3, Resources::new(9, 1, 1));
        assert!(got.is_err());
        // Switching from None: all three replicas held on b1, which keeps one.
        let fleet = [
            zoned("a1", Some("fsn1"), 8),
            holding(zoned("b1", Some("nbg1"), 2), Resources::new(6, 3, 3)),
            zoned("c1", Some("hel1"), 8),
        ];
        let got = place_spread(&fleet, Spread::Zones, 3, one).unwrap();
        assert_eq!(placed(&got), ["a1", "b1", "c1"]);
    }

    #[test]
    fn a_cordoned_node_and_its_zone_are_not_considered() {
        let mut cordoned = zoned("a1", Some("fsn1"), 8);
        cordoned.view.state = NodeState::Cordoned;
        let fleet = [
            cordoned,
            zoned("b1", Some("nbg1"), 8),
            zoned("c1", Some("hel1"), 8),
        ];
        let got = place_spread(&fleet, Spread::Zones, 2, Resources::new(1, 1, 1)).unwrap();
        assert_eq!(placed(&got), ["b1", "c1"]);
        assert_eq!(got[0].zone, Some("nbg1"));
    }
}
