//! What `drmtool top` lists of a [`Frame`]: its clients grouped (by process, cgroup, unit,
//! container, pod, Slurm job or user), filtered (user, GPU, text, idle, a pid's tree) and
//! sorted (a column, then a second one). Pure functions of the frame, so the live view, a
//! replay and the tests list the same rows.

use super::{ClientRow, Frame};
use std::collections::BTreeMap;

/// How the client rows are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum GroupBy {
    /// One row per DRM client (open DRM file).
    Client,
    /// One row per owning process.
    #[default]
    Process,
    /// Per cgroup v2 path.
    Cgroup,
    /// Per systemd unit.
    Unit,
    /// Per container.
    Container,
    /// Per Kubernetes pod.
    Pod,
    /// Per Slurm job.
    Job,
    /// Per user.
    User,
}

impl GroupBy {
    /// Every grouping, in the order the `g` key steps through them.
    pub const ALL: [GroupBy; 8] = [
        GroupBy::Process,
        GroupBy::Client,
        GroupBy::Cgroup,
        GroupBy::Unit,
        GroupBy::Container,
        GroupBy::Pod,
        GroupBy::Job,
        GroupBy::User,
    ];

    /// The next grouping after this one.
    pub fn next(self) -> GroupBy {
        after(&GroupBy::ALL, self)
    }

    /// Its name (the column header).
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Client => "client",
            GroupBy::Process => "process",
            GroupBy::Cgroup => "cgroup",
            GroupBy::Unit => "unit",
            GroupBy::Container => "container",
            GroupBy::Pod => "pod",
            GroupBy::Job => "job",
            GroupBy::User => "user",
        }
    }

    /// A client's group label (`-` where it has none of this kind).
    fn label(self, c: &ClientRow) -> String {
        let or_dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        match self {
            GroupBy::Client => format!(
                "{} {}",
                c.gpu_name,
                c.client_id
                    .map_or_else(|| format!("pid {}", c.pid), |i| format!("#{i}"))
            ),
            GroupBy::Process => c.pid.to_string(),
            GroupBy::Cgroup => or_dash(&c.cgroup),
            GroupBy::Unit => or_dash(&c.unit),
            GroupBy::Container => or_dash(&c.container),
            GroupBy::Pod => or_dash(&c.pod),
            GroupBy::Job => or_dash(&c.slurm_job),
            GroupBy::User => c
                .user
                .clone()
                .or_else(|| c.uid.map(|u| u.to_string()))
                .unwrap_or_else(|| "-".into()),
        }
    }
}

/// A column the rows sort by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Column {
    /// The group's label.
    Group,
    /// The first pid.
    Pid,
    /// The user.
    User,
    /// The GPUs.
    Gpu,
    /// Clients in the group.
    Clients,
    /// Memory held.
    Memory,
    /// Busiest engine's percent.
    Busy,
    /// dma-bufs held.
    Dmabufs,
    /// Command name.
    Command,
}

impl Column {
    /// Every column, in the order the sort key steps through them.
    pub const ALL: [Column; 9] = [
        Column::Memory,
        Column::Busy,
        Column::Pid,
        Column::User,
        Column::Gpu,
        Column::Clients,
        Column::Dmabufs,
        Column::Command,
        Column::Group,
    ];

    /// The next column after this one.
    pub fn next(self) -> Column {
        after(&Column::ALL, self)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Column::Group => "group",
            Column::Pid => "pid",
            Column::User => "user",
            Column::Gpu => "gpu",
            Column::Clients => "clients",
            Column::Memory => "memory",
            Column::Busy => "busy",
            Column::Dmabufs => "dmabufs",
            Column::Command => "command",
        }
    }
}

/// The item after `x` in `all`, the first after the last (what a key that cycles steps to).
fn after<T: Copy + PartialEq>(all: &[T], x: T) -> T {
    let i = all.iter().position(|y| *y == x).unwrap_or(0);
    all[(i + 1) % all.len()]
}

/// The order of the rows: a column, then a second one for ties, then the group label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    /// The first key.
    pub key: Column,
    /// The second key.
    pub then: Option<Column>,
    /// Largest first (the first key only).
    pub descending: bool,
}

impl Default for Sort {
    fn default() -> Self {
        Sort {
            key: Column::Memory,
            then: Some(Column::Busy),
            descending: true,
        }
    }
}

/// Which clients are listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this user's (login name or uid).
    pub user: Option<String>,
    /// Only this GPU's (its index).
    pub gpu: Option<usize>,
    /// Only those whose command name, command line, cgroup or group label contains this.
    pub text: Option<String>,
    /// Leave out clients that hold no memory and were not busy.
    pub hide_idle: bool,
    /// Only these processes (a process and its descendants, as the caller found them).
    pub pids: Option<Vec<u32>>,
}

impl Filter {
    fn keeps(&self, c: &ClientRow, label: &str) -> bool {
        if let Some(u) = &self.user
            && c.user.as_deref() != Some(u.as_str())
            && c.uid.map(|x| x.to_string()).as_deref() != Some(u.as_str())
        {
            return false;
        }
        if self.gpu.is_some() && c.gpu != self.gpu {
            return false;
        }
        if let Some(t) = &self.text
            && ![c.comm.as_str(), c.cmdline.as_str(), label]
                .iter()
                .chain(c.cgroup.as_deref().iter())
                .any(|s| s.contains(t.as_str()))
        {
            return false;
        }
        if self.hide_idle && c.memory.value.unwrap_or(0) == 0 && c.busy().unwrap_or(0.0) == 0.0 {
            return false;
        }
        if let Some(p) = &self.pids
            && !c.holders.iter().any(|h| p.contains(h))
        {
            return false;
        }
        true
    }
}

/// One listed row: a group of clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The group's label (a pid, a cgroup path, a job ...).
    pub label: String,
    /// The processes holding its clients, in the viewer's namespace.
    pub pids: Vec<u32>,
    /// Each of those processes' own pid (the last of its `NSpid`), in the same order.
    pub own_pids: Vec<u32>,
    /// Their users.
    pub users: Vec<String>,
    /// The GPUs its clients are on.
    pub gpus: Vec<String>,
    /// Clients.
    pub clients: usize,
    /// Memory held (`None`: unknown for every client of the group).
    pub memory: Option<u64>,
    /// Where the memory figures came from (`fdinfo`, `maps`, ...).
    pub sources: Vec<String>,
    /// Busiest engine's percent over its clients, summed per engine.
    pub busy: Option<f64>,
    /// dma-buf fds of its processes.
    pub dmabufs: usize,
    /// Of those, held by another process too.
    pub dmabufs_shared: usize,
    /// The first client's command name and line.
    pub command: String,
}

/// The frame's clients, filtered, grouped and sorted.
pub fn rows(f: &Frame, by: GroupBy, filter: &Filter, sort: Sort) -> Vec<Row> {
    let mut groups: BTreeMap<String, Vec<&ClientRow>> = BTreeMap::new();
    for c in &f.clients {
        let label = by.label(c);
        if filter.keeps(c, &label) {
            groups.entry(label).or_default().push(c);
        }
    }
    let mut out: Vec<Row> = groups.into_iter().map(|(l, cs)| row(l, &cs)).collect();
    out.sort_by(|a, b| {
        let first = cmp(a, b, sort.key);
        let first = if sort.descending {
            first.reverse()
        } else {
            first
        };
        first
            .then_with(|| {
                sort.then
                    .map_or(std::cmp::Ordering::Equal, |t| cmp(b, a, t))
            })
            .then_with(|| a.label.cmp(&b.label))
    });
    out
}

fn row(label: String, cs: &[&ClientRow]) -> Row {
    let mut pids = Vec::new();
    let mut own = Vec::new();
    let mut users = Vec::new();
    let mut gpus = Vec::new();
    let mut sources = Vec::new();
    let mut engines: BTreeMap<&str, f64> = BTreeMap::new();
    let mut memory: Option<u64> = None;
    // dma-bufs are the processes': counted once per process.
    let mut per_pid: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for c in cs {
        if !pids.contains(&c.pid) {
            pids.push(c.pid);
            own.push(c.ns_pids.last().copied().unwrap_or(c.pid));
        }
        let u = c
            .user
            .clone()
            .or_else(|| c.uid.map(|u| u.to_string()))
            .unwrap_or_else(|| "-".into());
        if !users.contains(&u) {
            users.push(u);
        }
        if !gpus.contains(&c.gpu_name) {
            gpus.push(c.gpu_name.clone());
        }
        if let Some(v) = c.memory.value {
            memory = Some(memory.unwrap_or(0).saturating_add(v));
            if !sources.contains(&c.memory.source) {
                sources.push(c.memory.source.clone());
            }
        }
        for (e, v) in &c.engines {
            let t = engines.entry(e.as_str()).or_insert(0.0);
            *t = (*t + v).min(100.0);
        }
        per_pid.insert(c.pid, (c.dmabufs, c.dmabufs_shared));
    }
    let first = cs[0];
    Row {
        label,
        pids,
        own_pids: own,
        users,
        gpus,
        clients: cs.len(),
        memory,
        sources,
        busy: engines.values().copied().reduce(f64::max),
        dmabufs: per_pid.values().map(|x| x.0).sum(),
        dmabufs_shared: per_pid.values().map(|x| x.1).sum(),
        command: if first.cmdline.is_empty() {
            first.comm.clone()
        } else {
            first.cmdline.clone()
        },
    }
}

/// Rows compared by one column, smallest first (unknown before any value).
fn cmp(a: &Row, b: &Row, c: Column) -> std::cmp::Ordering {
    match c {
        Column::Group => a.label.cmp(&b.label),
        Column::Pid => a.pids.first().cmp(&b.pids.first()),
        Column::User => a.users.cmp(&b.users),
        Column::Gpu => a.gpus.cmp(&b.gpus),
        Column::Clients => a.clients.cmp(&b.clients),
        Column::Memory => a.memory.cmp(&b.memory),
        Column::Busy => a
            .busy
            .partial_cmp(&b.busy)
            .unwrap_or(std::cmp::Ordering::Equal),
        Column::Dmabufs => a.dmabufs.cmp(&b.dmabufs),
        Column::Command => a.command.cmp(&b.command),
    }
}
