//! The one integration-test binary of coms-bridge: the real `coms-hermes-bridge` process against
//! a temporary `HOME` and `PI_COMS_DIR`, a fake `hermes` on `PATH`, and a coms peer in the test.

mod it;
