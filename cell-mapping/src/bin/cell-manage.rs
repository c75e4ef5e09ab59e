//! `cell-manage`: see `cell_mapping::cli` and docs/OPERATIONS.md.

fn main() {
    std::process::exit(cell_mapping::cli::main());
}
