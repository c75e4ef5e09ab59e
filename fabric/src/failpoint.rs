//! Failpoints: named places in the boot, reschedule and delete workflows
//! where a test makes the step fail, to prove that every failure ends in a
//! state with a way out (ACTIVE, ERROR with a fault naming the owner, or
//! gone) and leaves nothing behind.
//!
//! Off in production builds: without the `failpoints` feature (which only
//! the test builds turn on) [`hit`] is an inlined `Ok(())` and the `fail`
//! crate is not linked. With it, a point fails only once a test arms it
//! in its own process ([`arm`]); nothing reads an environment variable or
//! a configuration option, so a binary built for tests cannot be made to
//! fail by its configuration either.
//!
//! Every point is a constant here, named `<workflow>.<step>`, with the
//! component that owns the step.

/// Boot, super-conductor: the scheduler's placement claim.
pub const BOOT_CLAIM: &str = "boot.claim";
/// Boot, super-conductor: the instance row in the chosen cell.
pub const BOOT_CELL_ROW: &str = "boot.cell_row";
/// Boot, super-conductor: the landing (instance mapping pointed at the
/// cell, build request deleted: one API-database transaction).
pub const BOOT_LAND: &str = "boot.land";
/// Boot, super-conductor: the `build_and_run_instance` cast to the host.
pub const BOOT_CAST: &str = "boot.cast";
/// Boot, compute: the driver's spawn.
pub const BOOT_SPAWN: &str = "boot.spawn";
/// Reschedule, cell conductor: moving the claim to an alternate.
pub const RESCHEDULE_CLAIM: &str = "reschedule.claim";
/// Reschedule, cell conductor: the build cast to the alternate.
pub const RESCHEDULE_CAST: &str = "reschedule.cast";
/// Delete, Compute API: task state `deleting` and the `delete` action.
pub const DELETE_TASK_STATE: &str = "delete.task_state";
/// Delete, Compute API: the `terminate_instance` cast to the host.
pub const DELETE_CAST: &str = "delete.cast";
/// Delete, compute: the terminate cast is lost before the host takes it
/// (the compute drops it unread).
pub const DELETE_CAST_LOST: &str = "delete.cast_lost";
/// Delete, compute: the driver's destroy.
pub const DELETE_DESTROY: &str = "delete.destroy";
/// Delete, cell conductor: removing the allocations.
pub const DELETE_ALLOCATIONS: &str = "delete.allocations";
/// Delete, cell conductor: marking the instance deleted.
pub const DELETE_RECORD: &str = "delete.record";

/// Every point, in workflow order.
pub const ALL: &[&str] = &[
    BOOT_CLAIM,
    BOOT_CELL_ROW,
    BOOT_LAND,
    BOOT_CAST,
    BOOT_SPAWN,
    RESCHEDULE_CLAIM,
    RESCHEDULE_CAST,
    DELETE_TASK_STATE,
    DELETE_CAST,
    DELETE_CAST_LOST,
    DELETE_DESTROY,
    DELETE_ALLOCATIONS,
    DELETE_RECORD,
];

/// The failure an armed point injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("failure injected at failpoint {0}")]
pub struct Injected(pub &'static str);

/// Passes `point`: `Err` when a test armed it (and has hits left).
#[cfg(feature = "failpoints")]
pub fn hit(point: &'static str) -> Result<(), Injected> {
    fail::fail_point!(point, |_| Err(Injected(point)));
    Ok(())
}

/// Passes `point` (failpoints are not built in).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_point: &'static str) -> Result<(), Injected> {
    Ok(())
}

/// Arms `point` in this process: it fails the next `times` hits, or
/// every hit (`None`) until [`disarm`].
#[cfg(feature = "failpoints")]
pub fn arm(point: &'static str, times: Option<u32>) {
    let actions = match times {
        Some(n) => format!("{n}*return"),
        None => "return".to_owned(),
    };
    if let Err(e) = fail::cfg(point, &actions) {
        panic!("cannot arm failpoint {point}: {e}");
    }
}

/// Arms `point` in this process after `passes` hits that pass: every hit
/// after those fails, until [`disarm`].
#[cfg(feature = "failpoints")]
pub fn arm_after(point: &'static str, passes: u32) {
    if let Err(e) = fail::cfg(point, &format!("{passes}*off->return")) {
        panic!("cannot arm failpoint {point}: {e}");
    }
}

/// Disarms `point`: it passes again.
#[cfg(feature = "failpoints")]
pub fn disarm(point: &'static str) {
    fail::remove(point);
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn an_armed_point_fails_as_often_as_asked_then_passes() {
        assert_eq!(hit(BOOT_LAND), Ok(()));
        arm(BOOT_LAND, Some(2));
        assert_eq!(hit(BOOT_LAND), Err(Injected(BOOT_LAND)));
        assert_eq!(hit(BOOT_CAST), Ok(()), "only the armed point fails");
        assert_eq!(hit(BOOT_LAND), Err(Injected(BOOT_LAND)));
        assert_eq!(hit(BOOT_LAND), Ok(()));
        arm(BOOT_CAST, None);
        for _ in 0..3 {
            assert!(hit(BOOT_CAST).is_err());
        }
        disarm(BOOT_CAST);
        assert_eq!(hit(BOOT_CAST), Ok(()));
        arm_after(BOOT_CLAIM, 1);
        assert_eq!(hit(BOOT_CLAIM), Ok(()));
        assert!(hit(BOOT_CLAIM).is_err());
        assert!(hit(BOOT_CLAIM).is_err());
    }
}
