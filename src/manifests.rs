//! Reading Kubernetes manifests: files or directories of multi-document YAML (or JSON).
//!
//! Rules enforced here:
//! - a directory contributes its `*.yaml`, `*.yml` and `*.json` files in name order;
//! - empty documents are skipped; every other document must be a mapping with `apiVersion`,
//!   `kind` and `metadata.name`;
//! - an error names the file, the document number and what is wrong, and nothing is applied
//!   from a set that has an error.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A manifest that cannot be used, with where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not valid YAML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}, document {index}: {message}")]
    Invalid {
        path: PathBuf,
        index: usize,
        message: String,
    },
}

/// The examples shipped in the binary: the seed's nodes, then its tenants.
pub const EMBEDDED_EXAMPLES: [(&str, &str); 2] = [
    (
        "examples/nodes.yaml",
        include_str!("../examples/nodes.yaml"),
    ),
    (
        "examples/tenants.yaml",
        include_str!("../examples/tenants.yaml"),
    ),
];

/// One object and where it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub path: PathBuf,
    /// The document's number in its file, from 1.
    pub index: usize,
    pub object: Value,
}

impl Manifest {
    /// An error about this object, naming its file and document.
    pub fn error(&self, message: impl std::fmt::Display) -> ManifestError {
        ManifestError::Invalid {
            path: self.path.clone(),
            index: self.index,
            message: message.to_string(),
        }
    }
}

/// Reads every manifest from these files and directories, in order.
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<Value>, ManifestError> {
    Ok(read_manifests(paths)?
        .into_iter()
        .map(|m| m.object)
        .collect())
}

/// [`read_paths`], keeping where each object came from.
pub fn read_manifests(paths: &[PathBuf]) -> Result<Vec<Manifest>, ManifestError> {
    let mut manifests = Vec::new();
    for path in paths {
        for file in files_of(path)? {
            let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Read {
                path: file.clone(),
                source,
            })?;
            manifests.extend(parse_manifests(&file, &text)?);
        }
    }
    Ok(manifests)
}

fn files_of(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let read_error = |source| ManifestError::Read {
        path: path.to_owned(),
        source,
    };
    if !path.is_dir() {
        // Let the read report a missing file.
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_error)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml" || ext == "json")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Parses one file's documents and checks each names what it is.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    Ok(parse_manifests(path, text)?
        .into_iter()
        .map(|m| m.object)
        .collect())
}

/// [`parse`], keeping each object's document number.
pub fn parse_manifests(path: &Path, text: &str) -> Result<Vec<Manifest>, ManifestError> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ManifestError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    let mut objects = Vec::new();
    for (position, document) in documents.into_iter().enumerate() {
        let index = position.saturating_add(1);
        let invalid = |message: String| ManifestError::Invalid {
            path: path.to_owned(),
            index,
            message,
        };
        match &document {
            Value::Null => continue,
            Value::Object(map) => {
                for field in ["apiVersion", "kind"] {
                    if !map.get(field).is_some_and(Value::is_string) {
                        return Err(invalid(format!("{field} is missing or not a string")));
                    }
                }
                if !document
                    .pointer("/metadata/name")
                    .is_some_and(Value::is_string)
                {
                    return Err(invalid("metadata.name is missing or not a string".into()));
                }
            }
            other => {
                return Err(invalid(format!(
                    "expected a mapping (an object), found {other}"
                )));
            }
        }
        objects.push(Manifest {
            path: path.to_owned(),
            index,
            object: document,
        });
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_embedded_examples_hold_the_seed_nodes_and_tenants() {
        let mut names = Vec::new();
        for (file, text) in EMBEDDED_EXAMPLES {
            for object in parse(Path::new(file), text).unwrap() {
                names.push(format!(
                    "{}/{}",
                    object["kind"].as_str().unwrap(),
                    object["metadata"]["name"].as_str().unwrap()
                ));
            }
        }
        assert_eq!(
            names,
            [
                "Node/node-eu-1",
                "Node/node-eu-2",
                "Tenant/acme",
                "Tenant/big"
            ]
        );
    }

    #[test]
    fn a_document_without_a_kind_is_refused_with_its_file_and_number() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n";
        let error = parse(Path::new("fleet.yaml"), text).unwrap_err();
        assert_eq!(
            error.to_string(),
            "fleet.yaml, document 2: kind is missing or not a string"
        );
    }

    #[test]
    fn broken_yaml_is_refused_with_the_file_name() {
        let error = parse(Path::new("bad.yaml"), "kind: [unclosed\n").unwrap_err();
        assert!(
            error.to_string().starts_with("bad.yaml: not valid YAML"),
            "{error}"
        );
    }
}
