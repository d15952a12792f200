//! The local folder as a [`VaultBackend`]: the few operations the transaction needs, each
//! compare-and-swap on the exact bytes it expects (docs/contract.md#proposals "Never overwrite an edit"), plus the
//! object store of blobs (`.vaultgate/objects/`) that rollback and undo restore from. Everything
//! goes through `vault::write` and its `Area` checks.

use policy::VaultPath;
use proposals::ops::{FileOp, Zone};
use vault::write::{Area, WriteError, WriteMode};

use crate::core::VaultHandle;
use crate::error::GatewayError;
use crate::storage::{Cas, VaultBackend};

pub(crate) fn area(z: Zone) -> Area {
    match z {
        Zone::Note => Area::Note,
        Zone::Inbox => Area::Inbox,
        Zone::Machine => Area::Machine,
    }
}

fn object_path(hash: &str) -> Result<VaultPath, GatewayError> {
    Ok(VaultPath::parse(&format!(
        ".vaultgate/objects/{}/{hash}",
        hash.get(..2).unwrap_or("00")
    ))?)
}

/// A vault's folder as the transaction sees it.
pub(crate) struct Files<'a> {
    v: &'a VaultHandle,
}

impl<'a> Files<'a> {
    pub(crate) fn of(v: &'a VaultHandle) -> Files<'a> {
        Files { v }
    }
}

impl VaultBackend for Files<'_> {
    fn read(&self, zone: Zone, path: &str) -> Result<Option<(Vec<u8>, String)>, GatewayError> {
        let p = VaultPath::parse(path)?;
        Ok(self.v.reader.fs().read_for_write(area(zone), &p)?)
    }

    /// Keeps `bytes` (which hash to `hash`) in the object store; already there is fine.
    fn store_blob(&self, hash: &str, bytes: &[u8]) -> Result<(), GatewayError> {
        match self
            .v
            .reader
            .fs()
            .write_atomic(Area::Machine, &object_path(hash)?, bytes, WriteMode::Exclusive)
        {
            Ok(()) | Err(WriteError::Exists(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A blob from the object store, checked against its name.
    fn blob(&self, hash: &str) -> Result<Vec<u8>, GatewayError> {
        let (bytes, got) = self
            .v
            .reader
            .fs()
            .read_for_write(Area::Machine, &object_path(hash)?)?
            .ok_or_else(|| GatewayError::Internal(format!("history object {hash} is missing")))?;
        if got != hash {
            return Err(GatewayError::Internal(format!(
                "history object {hash} is corrupt"
            )));
        }
        Ok(bytes)
    }

    /// Removes a history object; false when there was none.
    fn remove_blob(&self, hash: &str) -> Result<bool, GatewayError> {
        if !self.has_blob(hash)? {
            return Ok(false);
        }
        self.remove(Zone::Machine, object_path(hash)?.as_str())?;
        Ok(true)
    }

    fn has_blob(&self, hash: &str) -> Result<bool, GatewayError> {
        Ok(self
            .v
            .reader
            .fs()
            .read_for_write(Area::Machine, &object_path(hash)?)?
            .is_some_and(|(_, h)| h == hash))
    }

    /// Removes a blob (the held copies of a permanent deletion); absent is fine.
    fn remove(&self, zone: Zone, path: &str) -> Result<(), GatewayError> {
        match self
            .v
            .reader
            .fs()
            .remove_file(area(zone), &VaultPath::parse(path)?)
        {
            Ok(()) | Err(WriteError::NotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs one operation that is in its `Before` state, comparing the bytes right before the
    /// file is replaced. SECURITY(T-PROP7): a file changed since it was checked is never
    /// overwritten; the step answers `Conflict` and the caller rolls the transaction back.
    fn exec(&self, op: &FileOp) -> Result<Cas, GatewayError> {
        let fs = self.v.reader.fs();
        let r = match op {
            FileOp::Put {
                zone,
                path,
                before,
                after,
            } => {
                let bytes = self.blob(after)?;
                let p = VaultPath::parse(path)?;
                match before {
                    None => fs.create_if_absent(area(*zone), &p, &bytes),
                    Some(b) => fs.replace_if(area(*zone), &p, &bytes, b),
                }
            }
            FileOp::Delete { zone, path, before } => {
                fs.remove_if(area(*zone), &VaultPath::parse(path)?, before)
            }
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => fs.rename_if(
                area(*from_zone),
                &VaultPath::parse(from)?,
                area(*to_zone),
                &VaultPath::parse(to)?,
                hash,
            ),
        };
        match r {
            Ok(()) => Ok(Cas::Done),
            Err(WriteError::Conflict(p)) => Ok(Cas::Conflict(p.to_string())),
            Err(WriteError::Exists(p)) => Ok(Cas::Conflict(p.to_string())),
            Err(WriteError::NotFound) => Ok(Cas::Conflict(
                op.paths()
                    .first()
                    .map(|(_, p)| (*p).to_owned())
                    .unwrap_or_default(),
            )),
            Err(e) => Err(e.into()),
        }
    }
}
