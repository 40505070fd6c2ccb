//! The `gcounter-rls` binary: the command line lives in the library (`gcounter_rls::cli`),
//! where tests and the reference generator read the same definition.

use std::process::ExitCode;

fn main() -> ExitCode {
    gcounter_rls::allocator::avoid_consolidation_stalls();
    gcounter_rls::cli::main()
}
