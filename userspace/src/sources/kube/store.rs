//! The objects of one watcher, as the few fields the compiler reads, following the watcher's
//! contract: a relist (after 410 Gone, or a reconnect) is buffered from `Init` to `InitDone` and
//! only then replaces the previous objects, so that a reconnect never wipes the table; objects
//! missing from a relist count as deleted. Pure: no I/O, no logs.

use std::collections::BTreeMap;

use kube::{ResourceExt, runtime::watcher};

pub struct Store<T> {
    objects: BTreeMap<String, T>,
    relist: Option<BTreeMap<String, T>>,
    synced: bool,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<T: PartialEq> Store<T> {
    /// Whether a complete list has arrived (the objects are the cluster's, not a partial view).
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The objects as of the last complete list and the events since.
    pub fn objects(&self) -> &BTreeMap<String, T> {
        &self.objects
    }

    /// Applies one watcher event; returns the keys whose object changed (added, replaced or
    /// removed): after a relist, only those that differ from what was held. `extract` keeps
    /// what the records need of an object, or None for an object that gives none (it is then
    /// removed).
    pub fn apply<K: ResourceExt>(
        &mut self,
        event: watcher::Event<K>,
        mut extract: impl FnMut(&K) -> Option<T>,
    ) -> Vec<String> {
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let (Some(relist), Some(info)) = (self.relist.as_mut(), extract(&object)) {
                    relist.insert(key(&object), info);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let mut changed = Vec::new();
                // Objects that did not change keep their value (and its record group).
                let mut previous = std::mem::take(&mut self.objects);
                self.objects = fresh
                    .into_iter()
                    .map(|(key, info)| match previous.remove(&key) {
                        Some(old) if old == info => (key, old),
                        _ => {
                            changed.push(key.clone());
                            (key, info)
                        }
                    })
                    .collect();
                changed.extend(previous.into_keys());
                self.synced = true;
                changed
            }
            watcher::Event::Apply(object) => {
                let key = key(&object);
                match extract(&object) {
                    Some(info) if self.objects.get(&key) == Some(&info) => Vec::new(),
                    Some(info) => {
                        self.objects.insert(key.clone(), info);
                        vec![key]
                    }
                    None if self.objects.remove(&key).is_some() => vec![key],
                    None => Vec::new(),
                }
            }
            watcher::Event::Delete(object) => {
                let key = key(&object);
                if self.objects.remove(&key).is_some() {
                    vec![key]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// Namespaced objects by namespace/name, cluster-scoped ones (nodes) by name.
fn key<K: ResourceExt>(object: &K) -> String {
    match object.namespace() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::Event;

    use super::*;

    fn pod(name: &str, value: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "edge", "labels": {"app": value}}
        }))
        .expect("a pod")
    }

    /// The label value, or nothing for a pod without one.
    fn value(pod: &Pod) -> Option<String> {
        pod.labels().get("app").cloned()
    }

    fn names(store: &Store<String>) -> Vec<(&str, &str)> {
        store
            .objects()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn a_list_counts_only_once_it_is_complete() {
        let mut store = Store::default();
        assert!(store.apply(Event::Init, value).is_empty());
        assert!(
            store
                .apply(Event::InitApply(pod("a", "x")), value)
                .is_empty()
        );
        assert!(!store.synced() && store.objects().is_empty());
        assert_eq!(
            store.apply(Event::InitDone, value),
            ["edge/a"],
            "the first list is a change"
        );
        assert!(store.synced());
        assert_eq!(names(&store), [("edge/a", "x")]);
    }

    #[test]
    fn a_relist_replaces_the_objects_at_its_end_and_drops_the_missing() {
        let mut store = Store::default();
        for event in [
            Event::Init,
            Event::InitApply(pod("a", "x")),
            Event::InitApply(pod("b", "y")),
            Event::InitDone,
        ] {
            store.apply(event, value);
        }
        store.apply(Event::Init, value);
        store.apply(Event::InitApply(pod("b", "y")), value);
        store.apply(Event::InitApply(pod("c", "z")), value);
        assert_eq!(
            names(&store).len(),
            2,
            "nothing changes while the relist runs"
        );
        let mut changed = store.apply(Event::InitDone, value);
        changed.sort();
        assert_eq!(changed, ["edge/a", "edge/c"], "only the difference");
        assert_eq!(names(&store), [("edge/b", "y"), ("edge/c", "z")]);
        // The same list again is no change.
        store.apply(Event::Init, value);
        store.apply(Event::InitApply(pod("b", "y")), value);
        store.apply(Event::InitApply(pod("c", "z")), value);
        assert!(store.apply(Event::InitDone, value).is_empty());
    }

    #[test]
    fn events_change_only_what_they_change() {
        let mut store = Store::default();
        store.apply(Event::Init, value);
        store.apply(Event::InitDone, value);
        assert_eq!(store.apply(Event::Apply(pod("a", "x")), value), ["edge/a"]);
        assert!(
            store.apply(Event::Apply(pod("a", "x")), value).is_empty(),
            "no change"
        );
        assert_eq!(store.apply(Event::Apply(pod("a", "z")), value), ["edge/a"]);
        let unlabelled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "edge"}
        }))
        .expect("a pod");
        assert_eq!(
            store.apply(Event::Apply(unlabelled), value),
            ["edge/a"],
            "lost its label"
        );
        assert!(store.objects().is_empty());
        assert!(
            store.apply(Event::Delete(pod("a", "z")), value).is_empty(),
            "already gone"
        );
    }
}
