"""gabbi fixtures for running upstream Placement's gabbits against our server.

Each class is named like upstream's fixture of the same purpose (see the
``fixtures:`` key of a gabbit) and recreates the same data: the same
environment variables and the same providers, inventories, traits,
aggregates, resource classes and allocations. Upstream writes them with its
database objects; we write them through our own HTTP API (the server under
test), at microversions whose side effects match upstream's object calls
(for example aggregates are set at 1.1, which, like upstream's
``set_aggregates()``, does not bump the provider generation).

The server's base URL is taken from ``PLACEMENT_CONFORMANCE_URL``; the
harness (run.py) sets it after starting a fresh server for each file.
"""

import json
import os
import urllib.error
import urllib.request
import uuid as uuidlib

from gabbi import fixture

URL_ENV = 'PLACEMENT_CONFORMANCE_URL'


def _uuid():
    return str(uuidlib.uuid4())


class FixtureSetupError(Exception):
    """A fixture request did not get the answer it needed."""


class Api:
    """The few calls fixtures need, made as an administrator."""

    def __init__(self, base_url):
        self.base = base_url.rstrip('/')
        self.known_classes = set()
        self.known_traits = set()
        self.generations = {}

    def call(self, method, path, body=None, version='1.0', expect=(200,)):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data,
                                     method=method)
        req.add_header('x-auth-token', 'admin')
        req.add_header('accept', 'application/json')
        req.add_header('openstack-api-version', 'placement %s' % version)
        if data is not None:
            req.add_header('content-type', 'application/json')
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        if status not in expect:
            raise FixtureSetupError('%s %s (microversion %s) -> %s: %s' % (
                method, path, version, status,
                raw.decode('utf-8', 'replace')[:500]))
        return json.loads(raw) if raw else None

    # Providers -----------------------------------------------------------

    def create_provider(self, name, *aggs, uuid=None, parent=None):
        """Like upstream's test_base.create_provider()."""
        rp_uuid = uuid or _uuid()
        body = {'name': name, 'uuid': rp_uuid}
        if parent:
            body['parent_provider_uuid'] = parent
        self.call('POST', '/resource_providers', body, version='1.14',
                  expect=(201,))
        self.generations[rp_uuid] = 0
        if aggs:
            self.set_aggregates(rp_uuid, list(aggs))
        return rp_uuid

    def refresh_generation(self, rp_uuid):
        rp = self.call('GET', '/resource_providers/%s' % rp_uuid,
                       version='1.14')
        self.generations[rp_uuid] = rp['generation']
        return rp['generation']

    def set_aggregates(self, rp_uuid, aggs):
        """Upstream's ResourceProvider.set_aggregates(): no generation bump."""
        self.call('PUT', '/resource_providers/%s/aggregates' % rp_uuid,
                  list(aggs), version='1.1')

    # Resource classes and inventory ----------------------------------------

    def ensure_rc(self, name):
        if name in self.known_classes or not name.startswith('CUSTOM_'):
            return
        self.call('PUT', '/resource_classes/%s' % name, version='1.7',
                  expect=(201, 204))
        self.known_classes.add(name)

    def create_rc(self, name):
        self.call('POST', '/resource_classes', {'name': name}, version='1.2',
                  expect=(201,))
        self.known_classes.add(name)

    def add_inventory(self, rp_uuid, rc, total, **kwargs):
        """Like upstream's test_base.add_inventory()."""
        self.ensure_rc(rc)
        kwargs.setdefault('max_unit', total)
        body = dict(kwargs)
        body['resource_class'] = rc
        body['total'] = total
        body['resource_provider_generation'] = self.refresh_generation(
            rp_uuid)
        self.call('POST', '/resource_providers/%s/inventories' % rp_uuid,
                  body, version='1.0', expect=(201,))

    # Traits ----------------------------------------------------------------

    def set_traits(self, rp_uuid, *traits):
        """Like upstream's test_base.set_traits(): replaces the set."""
        for name in traits:
            if name.startswith('CUSTOM_') and name not in self.known_traits:
                self.call('PUT', '/traits/%s' % name, version='1.6',
                          expect=(201, 204))
                self.known_traits.add(name)
        body = {
            'traits': list(traits),
            'resource_provider_generation': self.refresh_generation(rp_uuid),
        }
        self.call('PUT', '/resource_providers/%s/traits' % rp_uuid, body,
                  version='1.6')

    # Allocations -----------------------------------------------------------

    def set_allocation(self, rp_uuid, consumer, user, project, used):
        """Like upstream's test_base.set_allocation() for one consumer."""
        body = {
            'allocations': {rp_uuid: {'resources': dict(used)}},
            'project_id': project,
            'user_id': user,
        }
        self.call('PUT', '/allocations/%s' % consumer, body, version='1.12',
                  expect=(204,))


def _api():
    try:
        return Api(os.environ[URL_ENV])
    except KeyError:
        raise FixtureSetupError(
            '%s is not set: run the gabbits through run.py' % URL_ENV)


class APIFixture(fixture.GabbiFixture):
    """The basic service: no data, the environment upstream's tests use."""

    def start_fixture(self):
        self.api = _api()
        env = os.environ
        for name in ('RP_UUID', 'RP_NAME', 'RP_UUID1', 'RP_NAME1', 'RP_UUID2',
                     'RP_NAME2', 'PROJECT_ID', 'ADMIN_PROJECT_ID',
                     'SERVICE_PROJECT_ID', 'USER_ID', 'PROJECT_ID_ALT',
                     'USER_ID_ALT', 'INSTANCE_UUID', 'MIGRATION_UUID',
                     'CONSUMER_UUID', 'PARENT_PROVIDER_UUID',
                     'ALT_PARENT_PROVIDER_UUID'):
            env[name] = _uuid()
        env['CUSTOM_RES_CLASS'] = 'CUSTOM_IRON_NFV'
        env['CUSTOM_RES_CLASS1'] = 'CUSTOM_IRON_NFV1'
        env['CUSTOM_RES_CLASS2'] = 'CUSTOM_IRON_NFV2'

    def stop_fixture(self):
        pass


class AllocationFixture(APIFixture):
    """One provider (VCPU 10, DISK_GB 2048) with three consumers' allocations:
    consumer1 DISK_GB 1000 and consumer2 VCPU 6 (same user), alt_consumer
    DISK_GB 20 + VCPU 1 (alt user), all in PROJECT_ID."""

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        env['ALT_USER_ID'] = _uuid()
        project, user, alt_user = (env['PROJECT_ID'], env['USER_ID'],
                                   env['ALT_USER_ID'])
        rp = api.create_provider(env['RP_NAME'], uuid=env['RP_UUID'])
        api.add_inventory(rp, 'DISK_GB', 2048, step_size=10, min_unit=10,
                          max_unit=1000)
        api.add_inventory(rp, 'VCPU', 10, max_unit=10)

        consumer1 = _uuid()
        api.set_allocation(rp, consumer1, user, project, {'DISK_GB': 1000})
        env['CONSUMER_0'] = consumer1

        consumer2 = _uuid()
        api.set_allocation(rp, consumer2, user, project, {'VCPU': 6})
        env['CONSUMER_ID'] = consumer2

        alt_consumer = _uuid()
        env['ALT_CONSUMER_ID'] = alt_consumer
        api.set_allocation(rp, alt_consumer, alt_user, project,
                           {'DISK_GB': 20, 'VCPU': 1})

        env['ALT_RP_UUID'] = _uuid()
        env['ALT_RP_NAME'] = _uuid()


class SharedStorageFixture(APIFixture):
    """Two compute nodes (cn1, cn2), each with two NUMA children with one PF
    child each, and two sharing storage providers (ss, ss2), all in one
    aggregate."""

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        agg = _uuid()
        cn1 = api.create_provider('cn1', agg)
        cn2 = api.create_provider('cn2', agg)
        ss = api.create_provider('ss', agg)
        ss2 = api.create_provider('ss2', agg)
        numa1_1 = api.create_provider('numa1_1', parent=cn1)
        numa1_2 = api.create_provider('numa1_2', parent=cn1)
        numa2_1 = api.create_provider('numa2_1', parent=cn2)
        numa2_2 = api.create_provider('numa2_2', parent=cn2)
        pf1_1 = api.create_provider('pf1_1', parent=numa1_1)
        pf1_2 = api.create_provider('pf1_2', parent=numa1_2)
        pf2_1 = api.create_provider('pf2_1', parent=numa2_1)
        pf2_2 = api.create_provider('pf2_2', parent=numa2_2)

        env['AGG_UUID'] = agg
        env['CN1_UUID'], env['CN2_UUID'] = cn1, cn2
        env['SS_UUID'], env['SS2_UUID'] = ss, ss2
        env['NUMA1_1_UUID'], env['NUMA1_2_UUID'] = numa1_1, numa1_2
        env['NUMA2_1_UUID'], env['NUMA2_2_UUID'] = numa2_1, numa2_2
        env['PF1_1_UUID'], env['PF1_2_UUID'] = pf1_1, pf1_2
        env['PF2_1_UUID'], env['PF2_2_UUID'] = pf2_1, pf2_2

        for cn in (cn1, cn2):
            api.add_inventory(cn, 'VCPU', 24, allocation_ratio=16.0)
            api.add_inventory(cn, 'MEMORY_MB', 128 * 1024,
                              allocation_ratio=1.5)
        api.set_traits(cn1, 'HW_CPU_X86_SSE', 'HW_CPU_X86_SSE2')
        api.add_inventory(cn2, 'DISK_GB', 2000, reserved=100,
                          allocation_ratio=1.0)
        for shared in (ss, ss2):
            api.add_inventory(shared, 'DISK_GB', 2000, reserved=100,
                              allocation_ratio=1.0)
            api.set_traits(shared, 'MISC_SHARES_VIA_AGGREGATE')
        for pf in (pf1_1, pf1_2, pf2_1, pf2_2):
            api.add_inventory(pf, 'SRIOV_NET_VF', 8, allocation_ratio=1.0)


class NUMAAggregateFixture(APIFixture):
    """Two resourceless compute nodes (aggA; cn2 also aggB) with two NUMA
    children of 24 VCPU each (numa1_1 in aggC); sharing storage ss1 (aggA)
    and ss2 (aggC)."""

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        agg_a, agg_b, agg_c = _uuid(), _uuid(), _uuid()
        cn1 = api.create_provider('cn1', agg_a)
        cn2 = api.create_provider('cn2', agg_a, agg_b)
        ss1 = api.create_provider('ss1', agg_a)
        ss2 = api.create_provider('ss2', agg_c)
        numa1_1 = api.create_provider('numa1_1', agg_c, parent=cn1)
        numa1_2 = api.create_provider('numa1_2', parent=cn1)
        numa2_1 = api.create_provider('numa2_1', parent=cn2)
        numa2_2 = api.create_provider('numa2_2', parent=cn2)

        env['AGGA_UUID'], env['AGGB_UUID'], env['AGGC_UUID'] = (
            agg_a, agg_b, agg_c)
        env['CN1_UUID'], env['CN2_UUID'] = cn1, cn2
        env['SS1_UUID'], env['SS2_UUID'] = ss1, ss2
        env['NUMA1_1_UUID'], env['NUMA1_2_UUID'] = numa1_1, numa1_2
        env['NUMA2_1_UUID'], env['NUMA2_2_UUID'] = numa2_1, numa2_2

        for numa in (numa1_1, numa1_2, numa2_1, numa2_2):
            api.add_inventory(numa, 'VCPU', 24, allocation_ratio=16.0)
        for ss in (ss1, ss2):
            api.add_inventory(ss, 'DISK_GB', 2000, reserved=100,
                              allocation_ratio=1.0)
            api.set_traits(ss, 'MISC_SHARES_VIA_AGGREGATE')


class NUMANetworkFixture(APIFixture):
    """cn1: no inventory, NUMA children (with FPGA/VGPU children) and two
    network agents with bandwidth devices; cn2: VCPU/MEMORY_MB/DISK_GB with
    NIC roots parenting PFs with CUSTOM_VF; ss1 shares DISK_GB with both via
    aggA. Some VCPU is already allocated on numa0 and cn2."""

    cn1 = None
    cn2 = None

    def start_fixture(self):
        super().start_fixture()
        self.make_entities()

    def make_entities(self):
        api, env = self.api, os.environ
        agg_a = _uuid()
        env['AGGA_UUID'] = agg_a

        ss1 = api.create_provider('ss1', agg_a)
        api.set_traits(ss1, 'MISC_SHARES_VIA_AGGREGATE')
        api.add_inventory(ss1, 'DISK_GB', 2000)
        env['SS1_UUID'] = ss1

        if not self.cn1:
            self.cn1 = api.create_provider('cn1', agg_a)
        api.set_aggregates(self.cn1, [agg_a])
        api.set_traits(self.cn1, 'COMPUTE_VOLUME_MULTI_ATTACH')
        env['CN1_UUID'] = self.cn1

        numas = []
        for i in (0, 1):
            numa = api.create_provider('numa%d' % i, parent=self.cn1)
            traits = ['HW_NUMA_ROOT']
            if i == 1:
                traits.append('CUSTOM_FOO')
            api.set_traits(numa, *traits)
            api.add_inventory(numa, 'VCPU', 4)
            numas.append(numa)
            env['NUMA%d_UUID' % i] = numa
        api.add_inventory(numas[0], 'MEMORY_MB', 2048, min_unit=512,
                          step_size=256)
        api.add_inventory(numas[1], 'MEMORY_MB', 2048, min_unit=256,
                          max_unit=1024)
        user, proj = 'numafx-user', 'numafx-project'
        api.set_allocation(numas[0], _uuid(), user, proj, {'VCPU': 2})

        fpga = api.create_provider('fpga0', parent=numas[0])
        api.add_inventory(fpga, 'FPGA', 1)
        env['FPGA0_UUID'] = fpga

        pgpu = api.create_provider('pgpu0', parent=numas[0])
        api.add_inventory(pgpu, 'VGPU', 8)
        env['PGPU0_UUID'] = pgpu

        for i in (0, 1):
            fpga = api.create_provider('fpga1_%d' % i, parent=numas[1])
            api.add_inventory(fpga, 'FPGA', 1)
            env['FPGA1_%d_UUID' % i] = fpga

        agent = api.create_provider('sriov_agent', parent=self.cn1)
        api.set_traits(agent, 'CUSTOM_VNIC_TYPE_DIRECT')
        env['SRIOV_AGENT_UUID'] = agent
        for i in (1, 2):
            dev = api.create_provider('esn%d' % i, parent=agent)
            api.set_traits(dev, 'CUSTOM_PHYSNET%d' % i)
            api.add_inventory(dev, 'NET_BW_EGR_KILOBIT_PER_SEC', 10000 * i)
            env['ESN%d_UUID' % i] = dev

        agent = api.create_provider('ovs_agent', parent=self.cn1)
        api.set_traits(agent, 'CUSTOM_VNIC_TYPE_NORMAL')
        env['OVS_AGENT_UUID'] = agent
        dev = api.create_provider('br_int', parent=agent)
        api.set_traits(dev, 'CUSTOM_PHYSNET0')
        api.add_inventory(dev, 'NET_BW_EGR_KILOBIT_PER_SEC', 1000)
        env['BR_INT_UUID'] = dev

        if not self.cn2:
            self.cn2 = api.create_provider('cn2')
        api.set_aggregates(self.cn2, [agg_a])
        api.add_inventory(self.cn2, 'VCPU', 8)
        api.set_allocation(self.cn2, _uuid(), user, proj, {'VCPU': 3})
        api.add_inventory(self.cn2, 'MEMORY_MB', 2048, min_unit=1024,
                          step_size=128)
        api.add_inventory(self.cn2, 'DISK_GB', 1000)
        api.set_traits(self.cn2, 'CUSTOM_FOO')
        env['CN2_UUID'] = self.cn2

        nics = []
        for i in (1, 2, 3):
            nic = api.create_provider('nic%d' % i, parent=self.cn2)
            api.set_traits(nic, 'CUSTOM_HW_NIC_ROOT')
            nics.append(nic)
            env['NIC%s_UUID' % i] = nic
        for i in (1, 2):
            suf = '1_%d' % i
            pf = api.create_provider('pf%s' % suf, parent=nics[0])
            api.set_traits(pf, 'CUSTOM_PHYSNET%d' % i)
            api.add_inventory(pf, 'CUSTOM_VF', 4)
            env['PF%s_UUID' % suf] = pf
        for i in (0, 1, 2, 3):
            suf = '2_%d' % (i + 1)
            pf = api.create_provider('pf%s' % suf, parent=nics[1])
            api.set_traits(pf, 'CUSTOM_PHYSNET%d' % ((i % 2) + 1))
            api.add_inventory(pf, 'CUSTOM_VF', 2)
            env['PF%s_UUID' % suf] = pf
        suf = '3_1'
        pf = api.create_provider('pf%s' % suf, parent=nics[2])
        api.set_traits(pf, 'CUSTOM_PHYSNET1')
        api.add_inventory(pf, 'CUSTOM_VF', 8)
        env['PF%s_UUID' % suf] = pf


class DeepNUMANetworkFixture(NUMANetworkFixture):
    """NUMANetworkFixture with cn1 and cn2 under parents p1 and p2, both
    under grandparent gp1."""

    def make_entities(self):
        api = self.api
        gp1 = api.create_provider('gp1')
        p1 = api.create_provider('p1', parent=gp1)
        p2 = api.create_provider('p2', parent=gp1)
        self.cn1 = api.create_provider('cn1', parent=p1)
        self.cn2 = api.create_provider('cn2', parent=p2)
        super().make_entities()


class NonSharedStorageFixture(APIFixture):
    """Three compute nodes with VCPU, MEMORY_MB and DISK_GB, no sharing."""

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        for name in ('AGGA_UUID', 'AGGB_UUID', 'AGGC_UUID'):
            env[name] = _uuid()
        cns = [api.create_provider('cn%d' % i) for i in (1, 2, 3)]
        for i, cn in enumerate(cns, start=1):
            env['CN%d_UUID' % i] = cn
        for cn in cns:
            api.add_inventory(cn, 'VCPU', 24)
            api.add_inventory(cn, 'MEMORY_MB', 128 * 1024)
            api.add_inventory(cn, 'DISK_GB', 2000)


class GranularFixture(APIFixture):
    """cn_left, cn_middle, cn_right and sharing providers shr_disk_1,
    shr_disk_2 and shr_net, joined by aggregates aggA, aggB and aggC."""

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        api.create_rc('CUSTOM_NET_MBPS')
        agg_a, agg_b, agg_c = _uuid(), _uuid(), _uuid()
        env['AGGA'], env['AGGB'], env['AGGC'] = agg_a, agg_b, agg_c

        cn_left = api.create_provider('cn_left', agg_a)
        env['CN_LEFT'] = cn_left
        for rc, total in (('VCPU', 8), ('MEMORY_MB', 4096), ('DISK_GB', 500),
                          ('VGPU', 8), ('SRIOV_NET_VF', 8),
                          ('CUSTOM_NET_MBPS', 4000)):
            api.add_inventory(cn_left, rc, total)
        api.set_traits(cn_left, 'HW_CPU_X86_AVX', 'HW_CPU_X86_AVX2',
                       'HW_GPU_API_DXVA', 'HW_NIC_DCB_PFC', 'CUSTOM_FOO')

        cn_middle = api.create_provider('cn_middle', agg_a, agg_b)
        env['CN_MIDDLE'] = cn_middle
        for rc, total in (('VCPU', 8), ('MEMORY_MB', 4096),
                          ('SRIOV_NET_VF', 8), ('CUSTOM_NET_MBPS', 4000)):
            api.add_inventory(cn_middle, rc, total)
        api.set_traits(cn_middle, 'HW_CPU_X86_AVX', 'HW_CPU_X86_AVX2',
                       'HW_CPU_X86_SSE', 'HW_NIC_ACCEL_TLS')

        cn_right = api.create_provider('cn_right', agg_b, agg_c)
        env['CN_RIGHT'] = cn_right
        api.add_inventory(cn_right, 'VCPU', 8)
        api.add_inventory(cn_right, 'MEMORY_MB', 4096)
        api.add_inventory(cn_right, 'DISK_GB', 500)
        api.add_inventory(cn_right, 'VGPU', 8, max_unit=2)
        api.set_traits(cn_right, 'HW_CPU_X86_MMX', 'HW_GPU_API_DXVA',
                       'CUSTOM_DISK_SSD')

        shr_disk_1 = api.create_provider('shr_disk_1', agg_a)
        env['SHR_DISK_1'] = shr_disk_1
        api.add_inventory(shr_disk_1, 'DISK_GB', 1000)
        api.set_traits(shr_disk_1, 'MISC_SHARES_VIA_AGGREGATE',
                       'CUSTOM_DISK_SSD')

        shr_disk_2 = api.create_provider('shr_disk_2', agg_a, agg_b)
        env['SHR_DISK_2'] = shr_disk_2
        api.add_inventory(shr_disk_2, 'DISK_GB', 1000)
        api.set_traits(shr_disk_2, 'MISC_SHARES_VIA_AGGREGATE')

        shr_net = api.create_provider('shr_net', agg_c)
        env['SHR_NET'] = shr_net
        api.add_inventory(shr_net, 'SRIOV_NET_VF', 16)
        api.add_inventory(shr_net, 'CUSTOM_NET_MBPS', 40000)
        api.set_traits(shr_net, 'MISC_SHARES_VIA_AGGREGATE')


class NeutronQoSMultiSegmentFixture(APIFixture):
    """Four compute trees as Neutron builds them with QoS minimum bandwidth
    and packet rate on multi-segment networks: compute0 on PHYSNET_OTHER,
    compute1 on segment 1, compute2 on segment 2, compute3 on both with
    little bandwidth."""

    VNIC_DIRECT = ('CUSTOM_VNIC_TYPE_DIRECT',
                   'CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL',
                   'CUSTOM_VNIC_TYPE_MACVTAP')

    def _bw(self, rp, amount):
        self.api.add_inventory(rp, 'NET_BW_EGR_KILOBIT_PER_SEC', amount)
        self.api.add_inventory(rp, 'NET_BW_IGR_KILOBIT_PER_SEC', amount)

    def start_fixture(self):
        super().start_fixture()
        api, env = self.api, os.environ
        physnets = {0: ['CUSTOM_PHYSNET_OTHER'], 1: ['CUSTOM_PHYSNET_MSN_S1'],
                    2: ['CUSTOM_PHYSNET_MSN_S2'],
                    3: ['CUSTOM_PHYSNET_MSN_S1', 'CUSTOM_PHYSNET_MSN_S2']}
        sriov_agents = {}
        for n in (0, 1, 2, 3):
            name = 'compute%d' % n
            bw = 1000 if n == 3 else None
            compute = api.create_provider(name)
            env[name] = compute
            api.add_inventory(compute, 'VCPU', 8)
            api.add_inventory(compute, 'MEMORY_MB', 4096)
            api.add_inventory(compute, 'DISK_GB', 500)

            ovs = api.create_provider('%s:Open vSwitch agent' % name,
                                      parent=compute)
            env['%s:ovs_agent' % name] = ovs
            api.add_inventory(ovs, 'NET_PACKET_RATE_KILOPACKET_PER_SEC',
                              1000)
            api.set_traits(ovs, 'CUSTOM_VNIC_TYPE_NORMAL')

            for i, physnet in enumerate(physnets[n]):
                suffix = '' if i == 0 else str(i + 1)
                br_ex = api.create_provider(
                    '%s:Open vSwitch agent:br-ex%s' % (name, suffix),
                    parent=ovs)
                env['%s:br_ex%s' % (name, suffix)] = br_ex
                self._bw(br_ex, bw or 5000)
                api.set_traits(br_ex, 'CUSTOM_VNIC_TYPE_NORMAL', physnet)

            sriov = api.create_provider('%s:NIC Switch agent' % name,
                                        parent=compute)
            sriov_agents[n] = sriov
            # Upstream's fixture names compute2's agent for compute3 too.
            env['%s:sriov_agent' % name] = sriov_agents[2 if n == 3 else n]
            api.set_traits(sriov, *self.VNIC_DIRECT)

            for i, physnet in enumerate(physnets[n]):
                pf = api.create_provider(
                    '%s:NIC Switch agent:enp129s0f%d' % (name, i),
                    parent=sriov)
                env['%s:pf%d' % (name, i)] = pf
                self._bw(pf, bw or 10000)
                api.set_traits(pf, *(self.VNIC_DIRECT + (physnet,)))


class NoDataFixture(APIFixture):
    """For fixtures that only change server-side configuration upstream
    (policy, CORS). Our server is started with its defaults, so files that
    need them are out of the conformance selection; the classes exist so
    those files still load when run by hand."""


class OpenPolicyFixture(NoDataFixture):
    """Upstream: every policy rule opened to any user."""


class SecureRBACPolicyFixture(NoDataFixture):
    """Upstream: secure-RBAC defaults and scope enforced."""


class LegacyRBACPolicyFixture(NoDataFixture):
    """Upstream: the deprecated policy defaults."""


class CORSFixture(NoDataFixture):
    """Upstream: CORS middleware on for http://valid.example.com."""
