//! The two strategies under comparison, run the same way.

use tier_core::{DesiredSet, DriverConfig, Mode, TierLister, TierWriter};
use tier_runtime::TokioClock;

/// tierd's driver.
pub const TIERD: &str = "tierd";
/// Antrea's initializer since its fix (sequential).
pub const ANTREA_NEW: &str = "antrea-new";

/// Runs `strategy` once over `lister` and `writer` until it returns: tierd's driver in
/// [`Mode::Once`] (seeded with `seed`), or Antrea's sequential initializer.
pub async fn run<L, W>(strategy: &str, lister: L, writer: W, seed: u64)
where
    L: TierLister + 'static,
    W: TierWriter + 'static,
{
    let desired = DesiredSet::antrea();
    if strategy == TIERD {
        let config = DriverConfig {
            seed: Some(seed),
            ..DriverConfig::default()
        };
        match tier_runtime::spawn(lister, writer, desired, config, Mode::Once) {
            Ok(ensurer) => {
                ensurer.join().await;
            }
            Err(error) => eprintln!("tierd did not start: {error}"),
        }
    } else {
        tier_sim::baseline::antrea_new(&lister, &writer, &TokioClock, &desired).await;
    }
}
